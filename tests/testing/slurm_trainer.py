#!/usr/bin/env python3
"""A stand-in multi-node trainer for the slurm executor's tests.

Every rank checks the rendezvous variables the executor promises
(MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, GPUS_PER_NODE, WORLD_SIZE)
and meets the others over TCP at MASTER_ADDR:MASTER_PORT, as
torch.distributed would; rank 0 then writes one metrics line per step to
$INFRARSI_METRICS. --mode picks a failure: oom (a CUDA out-of-memory
message), fail (exit 3), sleep (runs until killed).
"""
import argparse
import json
import os
import socket
import sys
import time


def fail(msg):
    print(f"slurm_trainer: {msg}", file=sys.stderr, flush=True)
    sys.exit(4)


def rendezvous(nnodes, rank, addr, port):
    if nnodes == 1:
        return
    deadline = time.time() + 60
    if rank == 0:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(nnodes)
        srv.settimeout(60)
        seen = set()
        while len(seen) < nnodes - 1:
            conn, _ = srv.accept()
            seen.add(int(conn.recv(16).decode()))
            conn.sendall(b"ok")
            conn.close()
        if seen != set(range(1, nnodes)):
            fail(f"rank 0 met ranks {sorted(seen)}, expected 1..{nnodes - 1}")
        srv.close()
        return
    while True:
        try:
            with socket.create_connection((addr, port), timeout=5) as c:
                c.sendall(str(rank).encode())
                if c.recv(2) != b"ok":
                    fail("rank 0 did not answer")
                return
        except OSError:
            if time.time() > deadline:
                fail(f"rank {rank} could not reach rank 0 at {addr}:{port}")
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--step-ms", type=int, default=50)
    ap.add_argument("--mode", default="ok", choices=["ok", "oom", "fail", "sleep"])
    a = ap.parse_args()
    env = os.environ
    for name in ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "GPUS_PER_NODE",
                 "WORLD_SIZE", "INFRARSI_METRICS", "INFRARSI_TRIAL_ID"):
        if not env.get(name):
            fail(f"{name} is not set")
    nnodes, rank = int(env["NNODES"]), int(env["NODE_RANK"])
    gpn, world = int(env["GPUS_PER_NODE"]), int(env["WORLD_SIZE"])
    if nnodes != a.nodes:
        fail(f"NNODES={nnodes}, the spec asked for {a.nodes} nodes")
    if not 0 <= rank < nnodes or world != nnodes * gpn:
        fail(f"NODE_RANK={rank} WORLD_SIZE={world} do not fit NNODES={nnodes} x {gpn}")
    if (env.get("PET_NNODES"), env.get("PET_NODE_RANK")) != (env["NNODES"], env["NODE_RANK"]):
        fail("torchrun's PET_NNODES/PET_NODE_RANK disagree with NNODES/NODE_RANK")
    if "INFRARSI_TOKEN" in env:
        fail("the agent's token reached the job")
    rendezvous(nnodes, rank, env["MASTER_ADDR"], int(env["MASTER_PORT"]))
    if a.mode == "oom":
        print("RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB", file=sys.stderr,
              flush=True)
        sys.exit(1)
    if a.mode == "fail":
        print(f"rank {rank}: loss diverged, giving up", file=sys.stderr, flush=True)
        sys.exit(3)
    if a.mode == "sleep":
        # One warm-up line once every rank joined, then nothing: the job
        # runs on all its nodes until it is killed.
        if rank == 0:
            with open(env["INFRARSI_METRICS"], "a") as out:
                out.write(json.dumps({"step": 0, "loss": 10.0, "tokens": 4096, "step_time_s": 0.01,
                                      "peak_mem_gib": 10.0, "warmup": True}) + "\n")
        time.sleep(3600)
    out = open(env["INFRARSI_METRICS"], "a") if rank == 0 else None
    for s in range(a.steps + 1):
        t0 = time.monotonic()
        time.sleep(a.step_ms / 1000.0)
        dt = time.monotonic() - t0
        if out:
            out.write(json.dumps({"step": s, "loss": 10.0 - 0.01 * s, "tokens": 4096,
                                  "step_time_s": dt, "peak_mem_gib": 10.0,
                                  "warmup": s == 0}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
