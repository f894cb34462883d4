"""A stand-in for a team's unmodified training script: it prints exactly the
per-step lines of the framework it stands in for (Megatron-LM's
training_log, torchtitan's metrics line, DeepSpeed's ThroughputTimer plus the
script's own loss line, the HF Trainer's log dict), takes that framework's
flags, and knows nothing of InfraRSI. Standard library only.

    python3 framework_trainer.py megatron --micro-batch-size 2 --global-batch-size 32 ...

A step takes longer the smaller the micro-batch (more micro-steps per global
batch); the loss depends on the step, the global batch and the sequence
length only, so an honest micro-batch change leaves it as it is and a
shorter sequence changes it.
"""

import datetime
import json
import sys
import time


def parse(argv):
    """--key=value and --key value flags, any spelling; a bare flag is True."""
    out = {}
    i = 0
    while i < len(argv):
        w = argv[i]
        if not w.startswith("--"):
            raise SystemExit(f"unexpected argument {w!r}")
        if "=" in w:
            k, v = w[2:].split("=", 1)
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            k, v = w[2:], argv[i + 1]
            i += 2
        else:
            k, v = w[2:], True
            i += 1
        out[k.replace("-", "_")] = v
    return out


def loss_at(step, global_batch, seq_len):
    # Deterministic; the same for every micro-batch split of the batch.
    return 10.0 - 0.4 * step / (1 + step) + 0.001 * (seq_len / 128 - 1) * step + 0.0 * global_batch


def run(framework, steps, micro, global_batch, seq_len, base_ms, log_every=1):
    per_step = (base_ms / 1000.0) * (0.4 + 0.6 / micro)
    consumed = 0
    # torchtitan's rate is over the time since its previous log line, not
    # one step's compute (MetricsProcessor.log: time_delta since time_last_log).
    last_log = time.perf_counter()
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        time.sleep(per_step)
        took = time.perf_counter() - t0
        consumed += global_batch
        loss = loss_at(step, global_batch, seq_len)
        if step % log_every:
            continue
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        if framework == "megatron":
            print(f" [{now}] iteration {step:8d}/{steps:8d} | consumed samples: {consumed:12d} |"
                  f" elapsed time per iteration (ms): {took * 1000.0:.1f} |"
                  f" throughput per GPU (TFLOP/s/GPU): 1.0 | learning rate: 1.000000E-04 |"
                  f" global batch size: {global_batch:5d} | lm loss: {loss:.6E} |"
                  f" loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 |"
                  f" number of nan iterations:   0 |", flush=True)
            if step == 1:
                print("[Rank 0] (after 1 iterations) memory (MB) | allocated: 512.0 | "
                      f"max allocated: {256.0 * micro + 1024:.1f} | reserved: 2048.0 | "
                      "max reserved: 2048.0", flush=True)
        elif framework == "torchtitan":
            logged = time.perf_counter()
            tps = int(global_batch * seq_len / max(logged - last_log, 1e-9))
            last_log = logged
            print(f"[titan] {now},000 - root - INFO - \x1b[31mstep: {step:2}  "
                  f"\x1b[32mloss: {loss:8.5f}  \x1b[38;2;180;60;0mgrad_norm:  1.0000  "
                  f"\x1b[38;2;54;234;195mmemory: {0.25 * micro + 1:5.2f}GiB(1.00%)  "
                  f"\x1b[34mtps: {tps:,}  \x1b[36mtflops: 0.01  \x1b[35mmfu: 0.01%\x1b[39m",
                  file=sys.stderr, flush=True)
        elif framework == "deepspeed":
            print(f"[{now},000] [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, skipped=0,"
                  f" lr=[0.0001], mom=[(0.9, 0.999)]", flush=True)
            print(f"[{now},000] [INFO] [timer.py:260:stop] epoch=0/micro_step="
                  f"{step * global_batch // micro}/global_step={step}, RunningAvgSamplesPerSec="
                  f"{global_batch / took}, CurrSamplesPerSec={global_batch / took}, "
                  f"MemAllocated=0.5GB, MaxMemAllocated={0.25 * micro + 1:.2f}GB", flush=True)
            print(f"{now} | INFO | __main__:log_dist:54 - [Rank 0] Loss: {loss:.4f}", flush=True)
        elif framework == "hf_trainer":
            print(f"{{'loss': {round(loss, 4)}, 'grad_norm': 1.0, 'learning_rate': 5e-05, "
                  f"'epoch': {step / steps:.2f}}}", flush=True)
    if framework == "hf_trainer":
        print(f"{{'train_runtime': 1.0, 'train_samples_per_second': 1.0, "
              f"'train_steps_per_second': 1.0, 'train_loss': 9.9, 'epoch': 1.0}}", flush=True)


def main():
    framework = sys.argv[1]
    f = parse(sys.argv[2:])
    if framework == "megatron":
        micro, gb = int(f["micro_batch_size"]), int(f["global_batch_size"])
        seq, steps, every = int(f["seq_length"]), int(f["train_iters"]), int(f.get("log_interval", 100))
    elif framework == "torchtitan":
        micro, gb = int(f["training.local_batch_size"]), int(f["training.global_batch_size"])
        seq, steps = int(f["training.seq_len"]), int(f["training.steps"])
        every = int(f.get("metrics.log_freq", 10))
    elif framework == "deepspeed":
        with open(f["deepspeed_config"], encoding="utf-8") as fh:
            cfg = json.load(fh)
        micro = int(f.get("train_micro_batch_size_per_gpu", cfg["train_micro_batch_size_per_gpu"]))
        gb = int(cfg["train_batch_size"])
        seq, steps, every = int(f["seq_length"]), int(f["steps"]), int(cfg.get("steps_per_print", 10))
    elif framework == "hf_trainer":
        micro = int(f["per_device_train_batch_size"])
        accum = int(f.get("gradient_accumulation_steps", 1))
        gb = micro * accum
        seq, steps, every = int(f["max_seq_length"]), int(f["max_steps"]), int(f.get("logging_steps", 500))
    else:
        raise SystemExit(f"unknown framework {framework!r}")
    if gb % micro:
        raise SystemExit(f"global batch {gb} is not a multiple of micro-batch {micro}")
    run(framework, steps, micro, gb, seq, float(f.get("base_ms", 200)), every)


if __name__ == "__main__":
    main()
