"""Trains the small GPT for a few steps under InfraRSI's harness.

Knobs (command-line flags, filled in by InfraRSI from the session's space):
  --micro-batch N   sequences per forward/backward; the global batch stays
                    fixed, the rest is gradient accumulation
  --threads N       intra-op CPU threads
  --recompute       activation checkpointing
  --attn IMPL       attention kernel: matmul or einsum
  --optimizer NAME  adamw (per-parameter loop) or adamw_foreach (multi-tensor)
Runs on CPU in seconds; on a GPU when one is present. Launched on several
nodes (a Slurm job of InfraRSI's slurm executor sets NNODES, NODE_RANK,
MASTER_ADDR and MASTER_PORT), it trains data-parallel, one process per node
over gloo: each node takes its share of the global batch, gradients are
averaged, and node 0 writes the metrics. The global batch, and so the loss
curve, is the same on any number of nodes.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import infrarsi_harness  # noqa: E402
from model import GPT  # noqa: E402

GLOBAL_BATCH = 8
SEQ_LEN = 64
DATA_SEED = 1234


def distributed():
    """(world, rank, torch.distributed or None) from the launcher's rendezvous."""
    world = int(os.environ.get("NNODES", "1"))
    if world <= 1:
        return 1, 0, None
    import torch.distributed as dist
    rank = int(os.environ["NODE_RANK"])
    dist.init_process_group(
        "gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        world_size=world, rank=rank)
    return world, rank, dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--recompute", default="false", choices=["false", "true"])
    ap.add_argument("--attn", default="matmul", choices=["matmul", "einsum"])
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "adamw_foreach"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    world, rank, dist = distributed()
    local_batch = GLOBAL_BATCH // world
    if GLOBAL_BATCH % world != 0 or local_batch % args.micro_batch != 0:
        sys.exit(f"--micro-batch must divide the global batch {GLOBAL_BATCH} "
                 f"over {world} node(s)")
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = GPT(data.VOCAB, dim=128, heads=8, layers=2, seq_len=SEQ_LEN, impl=args.attn,
                recompute=args.recompute == "true").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3,
                            foreach=args.optimizer == "adamw_foreach")
    corpus = data.corpus(DATA_SEED)
    h = infrarsi_harness.Harness(tokens_per_step=GLOBAL_BATCH * SEQ_LEN,
                                 warmup_steps=args.warmup, data_seed=DATA_SEED, dtype="fp32",
                                 path=None if rank == 0 else os.devnull)
    h.watch_optimizer(opt)
    accum = local_batch // args.micro_batch
    for step in range(args.warmup + args.steps):
        started = time.perf_counter()
        x, y = data.batch(corpus, step, GLOBAL_BATCH, SEQ_LEN, DATA_SEED)
        x, y = x[rank * local_batch:(rank + 1) * local_batch], y[rank * local_batch:(rank + 1) * local_batch]
        x, y = x.to(device), y.to(device)
        with h.step() as s:
            total, tokens = 0.0, 0
            for i in range(accum):
                xb = x[i * args.micro_batch:(i + 1) * args.micro_batch]
                yb = y[i * args.micro_batch:(i + 1) * args.micro_batch]
                loss = model(xb, yb) / accum
                loss.backward()
                total += float(loss)
                tokens += yb.numel()
            if dist is not None:
                # The mean over the whole global batch, as on one node.
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
                stats = torch.tensor([total, float(tokens)])
                dist.all_reduce(stats)
                total, tokens = float(stats[0]) / world, int(stats[1])
            opt.step()
            opt.zero_grad()
            s.loss = total
            s.tokens = tokens
        if rank == 0:
            # The script's own per-step line, as any trainer prints one: a
            # log reader (executor.process.metrics: {reader: jsonl}) reads
            # it without the harness.
            print(json.dumps({"step": step, "loss": total, "tokens": tokens, "data_seed": DATA_SEED,
                              "step_time_s": time.perf_counter() - started}), flush=True)


if __name__ == "__main__":
    main()
