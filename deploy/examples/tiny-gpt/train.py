"""Trains the small GPT for a few steps under InfraRSI's harness.

Knobs (command-line flags, filled in by InfraRSI from the session's space):
  --micro-batch N   sequences per forward/backward; the global batch stays
                    fixed, the rest is gradient accumulation
  --threads N       intra-op CPU threads
  --recompute       activation checkpointing
  --attn IMPL       attention kernel: matmul or einsum
  --optimizer NAME  adamw (per-parameter loop) or adamw_foreach (multi-tensor)
Runs on CPU in seconds; on a GPU when one is present.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import infrarsi_harness  # noqa: E402
from model import GPT  # noqa: E402

GLOBAL_BATCH = 8
SEQ_LEN = 64
DATA_SEED = 1234


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--recompute", default="false")
    ap.add_argument("--attn", default="matmul")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    if GLOBAL_BATCH % args.micro_batch != 0:
        sys.exit(f"--micro-batch must divide the global batch {GLOBAL_BATCH}")
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = GPT(data.VOCAB, dim=128, heads=8, layers=2, seq_len=SEQ_LEN, impl=args.attn,
                recompute=args.recompute == "true").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3,
                            foreach=args.optimizer == "adamw_foreach")
    corpus = data.corpus(DATA_SEED)
    h = infrarsi_harness.Harness(tokens_per_step=GLOBAL_BATCH * SEQ_LEN,
                                 warmup_steps=args.warmup, data_seed=DATA_SEED, dtype="fp32")
    h.watch_optimizer(opt)
    accum = GLOBAL_BATCH // args.micro_batch
    for step in range(args.warmup + args.steps):
        x, y = data.batch(corpus, step, GLOBAL_BATCH, SEQ_LEN, DATA_SEED)
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
            opt.step()
            opt.zero_grad()
            s.loss = total
            s.tokens = tokens


if __name__ == "__main__":
    main()
