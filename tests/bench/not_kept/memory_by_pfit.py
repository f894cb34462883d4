#!/usr/bin/python3
"""The memory model's residuals at its picks, by P(fits) at the pick.

Reads the SEARCH_TRACE lines memory_trace_q.patch adds (stderr of
search_bench --generalize): per pick that ran or ran out of memory, its
P(fits), the model's mean log peak, its whole predictive sd and the
weights' part of its variance (q). Per P(fits) bin: picks, OOMs, the
measured peaks' residuals (log peak less the mean: mean and sd), the
residual sd (median; the predictive variance less q) and a tenth of the
weights' doubt, sqrt(0.1 q) (median; memory_doubt_scale's default, so
read it with X_LDOUBT=0), and how many of the bin's picks were among a
session's first six trials.
Usage: memory_by_pfit.py TRACE...
"""
import math
import re
import statistics as st
import sys

rows = []
for f in sys.argv[1:]:
    for line in open(f):
        m = re.match(r'seed \d+ trial +(\d+) (\S+) +\S+ .*?([0-9.]+) GiB pfit (\S+) mem (\S+) (\S+) (\S+) \[', line)
        if not m:
            continue
        trial, status, peak, p, mu, sd, q = m.groups()
        p, mu, sd, q, peak = float(p), float(mu), float(sd), float(q), float(peak)
        if sd == 0 or status not in ('ok', 'oom'):
            continue
        rows.append((p, status, peak, mu, q, max(sd * sd - q, 0.0), int(trial)))
print('P(fits)       picks  OOMs  resid mean  resid sd  sigma (med)  sqrt(0.1 q) (med)  trials 1-6')
for lo, hi in [(0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01)]:
    sel = [r for r in rows if lo <= r[0] < hi]
    ok = [r for r in sel if r[1] == 'ok' and r[2] > 0]
    if len(ok) < 2:
        continue
    res = [math.log(r[2]) - r[3] for r in ok]
    print('[%.1f, %.1f)  %6d %5d  %10.3f  %8.3f  %11.3f  %17.3f  %10d' % (
        lo, min(hi, 1.0), len(sel), sum(r[1] == 'oom' for r in sel), st.mean(res), st.pstdev(res),
        st.median(math.sqrt(r[5]) for r in sel), st.median(math.sqrt(0.1 * r[4]) for r in sel),
        sum(r[6] <= 6 for r in sel)))
