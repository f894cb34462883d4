#!/usr/bin/env python3
"""Medians of a proposal's phases, from the stderr of a search_bench run
built with tests/bench/not_kept/phase_timers.patch and PHASES=1:

  git apply tests/bench/not_kept/phase_timers.patch && cmake --build build --target search_bench
  PHASES=1 LATENCY_N=60 SEARCH_NO_TPE=1 build/tests/search_bench --latency 2000 2> /tmp/phases.txt
  python3 tests/bench/not_kept/phase_times.py /tmp/phases.txt
  git apply -R tests/bench/not_kept/phase_timers.patch

The latency bench makes, per landscape, one untimed proposal and LATENCY_N
timed ones without the bank's trials, then the same with them; the lines
come in that order (PH: the proposing thread's phases, ms; FITS: when the
step-time and launch fits ended on the other thread and the memory fit
here, ms from the fits' start; MEM: the memory model's parts and its
factorizations; PFIT: P(fits) of each pick, its mean peak, sigma and the
weights' doubt q). Docs: "Proposals a tenth cheaper" and "Why P(fits)
reads low near a run" in docs/benchmarks.md.
"""
import re
import statistics
import sys

groups = {'PH': [], 'FITS': [], 'MEM': []}
for line in open(sys.argv[1]):
    kind = line.split(' ', 1)[0]
    if kind in groups:
        groups[kind].append({k: float(v) for k, v in re.findall(r'(\w+)=([-\d.]+)', line)})
for kind, rows in groups.items():
    if not rows:
        continue
    # Eight runs of equal length (four landscapes, without and with the
    # bank), each led by its untimed proposal.
    n = len(rows) // 8
    for g in range(8):
        part = rows[g * n + 1:(g + 1) * n]
        if not part:
            continue
        keys = list(part[0])
        print(kind, g, ' '.join(f'{k}={statistics.median(r.get(k, 0) for r in part):.2f}' for k in keys))
