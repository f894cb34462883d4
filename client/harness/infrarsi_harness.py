"""InfraRSI's timing harness: the step time that counts.

A training script wraps each optimizer step in ``harness.step()``; the harness
synchronises the device on both sides, times the step, and appends the
metrics line InfraRSI reads from ``$INFRARSI_METRICS``. It is a protected file:
sessions lock its hash at init, and the agent refuses a trial that changed it.

    import infrarsi_harness

    h = infrarsi_harness.Harness(tokens_per_step=global_batch * seq_len,
                                 warmup_steps=1, data_seed=1234, dtype="bf16")
    h.watch_optimizer(optimizer)   # counts optimizer.step() inside the timer
    for _ in range(steps):
        with h.step() as s:
            loss = train_one_step()  # forward, backward AND optimizer.step()
            s.loss = float(loss)
            s.phases["fwd_bwd_s"] = ...  # optional
    # on an out-of-memory error: h.oom()

Only the standard library is needed; torch is used when the script imported it (CUDA
synchronisation, peak reserved memory).
"""

import contextlib
import json
import math
import os
import sys
import time


def _torch_cuda():
    # Only a torch the training script imported itself: importing it here
    # would add a second or more of start-up and teardown to a script that
    # never uses it, time the step counts nowhere.
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return torch
    except Exception:  # pylint: disable=broad-except
        pass
    return None


class StepRecord:
    """What the body of ``with harness.step()`` fills in."""

    def __init__(self):
        self.loss = None
        self.tokens = None
        self.peak_mem_gib = None
        self.phases = {}


class Harness:
    """Times optimizer steps and writes one metrics line per step."""

    def __init__(self, tokens_per_step, warmup_steps=1, data_seed=None, dtype=None, path=None):
        # Outside the agent (no $INFRARSI_METRICS) the script runs as it
        # always did: the harness times nothing and writes nothing.
        self.path = path or os.environ.get("INFRARSI_METRICS")
        self.tokens_per_step = int(tokens_per_step)
        self.warmup_steps = int(warmup_steps)
        self.data_seed = data_seed
        self.dtype = dtype
        self._torch = _torch_cuda()
        self._file = open(self.path, "a", buffering=1, encoding="utf-8") if self.path else None
        self._step = 0
        self._in_window = False
        self._watching = False
        self._optimizer_steps = 0

    def _sync(self):
        if self._torch is not None:
            self._torch.cuda.synchronize()

    def watch_optimizer(self, optimizer):
        """Counts calls of optimizer.step() made inside the timed window."""
        original = optimizer.step

        def step(*args, **kwargs):
            if self._in_window:
                self._optimizer_steps += 1
            return original(*args, **kwargs)

        optimizer.step = step
        self._watching = True
        return optimizer

    @contextlib.contextmanager
    def step(self):
        record = StepRecord()
        if self._file is None:
            yield record
            return
        self._sync()
        self._optimizer_steps = 0
        self._in_window = True
        start = time.perf_counter()
        try:
            yield record
            self._sync()
        finally:
            elapsed = time.perf_counter() - start
            self._in_window = False
        loss = float("nan") if record.loss is None else float(record.loss)
        line = {
            "step": self._step,
            # JSON has no NaN: a non-finite loss travels as a string.
            "loss": loss if math.isfinite(loss) else str(loss),
            "tokens": self.tokens_per_step if record.tokens is None else int(record.tokens),
            "step_time_s": elapsed,
            "peak_mem_gib": self._peak_mem(record),
            "warmup": self._step < self.warmup_steps,
        }
        if record.phases:
            line["phases"] = {k: float(v) for k, v in record.phases.items()}
        if self.data_seed is not None:
            line["data_seed"] = int(self.data_seed)
        if self.dtype is not None:
            line["dtype"] = str(self.dtype)
        if self._watching:
            line["optimizer_steps"] = self._optimizer_steps
        self._file.write(json.dumps(line) + "\n")
        self._step += 1

    def _peak_mem(self, record):
        if record.peak_mem_gib is not None:
            return float(record.peak_mem_gib)
        if self._torch is not None:
            return self._torch.cuda.max_memory_reserved() / 2**30
        return 0.0

    def oom(self):
        """Marks the trial as out of memory."""
        if self._file is None:
            return
        self._file.write(json.dumps({"event": "oom"}) + "\n")
