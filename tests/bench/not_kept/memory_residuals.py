#!/usr/bin/python3
"""The memory model's residuals at its picks, by trial number.

Reads the SEARCH_TRACE lines memory_trace.patch adds (stderr of
search_bench --generalize): per pick that ran, log peak less the model's
mean, against the model's predictive sd (its whole doubt).
Usage: memory_residuals.py TRACE...
"""
import math
import re
import sys

rows = []
for f in sys.argv[1:]:
    for line in open(f):
        m = re.match(r'seed \d+ trial +(\d+) (\S+) +\S+ .*?([0-9.]+) GiB pfit (\S+) mem (\S+) (\S+) \[', line)
        if not m:
            continue
        n, st, peak, p, mu, sd = m.groups()
        if float(sd) == 0 or st not in ('ok', 'oom'):
            continue
        rows.append((int(n), st, float(peak), float(mu), float(sd)))
for lo, hi in [(1, 3), (4, 6), (7, 10), (11, 15), (16, 20), (21, 30)]:
    sel = [r for r in rows if lo <= r[0] <= hi]
    ok = [r for r in sel if r[1] == 'ok' and r[2] > 0]
    if not ok:
        continue
    res = [math.log(r[2]) - r[3] for r in ok]
    z = [(math.log(r[2]) - r[3]) / r[4] for r in ok]
    def sd(v):
        m = sum(v) / len(v)
        return m, math.sqrt(sum((x - m) ** 2 for x in v) / len(v))
    (mr, sr), (mz, sz) = sd(res), sd(z)
    print(f"trials {lo}-{hi}: picks {len(sel)}, OOMs {sum(r[1] == 'oom' for r in sel)}; residual mean {mr:+.3f} "
          f"sd {sr:.3f}; model sd mean {sum(r[4] for r in ok) / len(ok):.3f}; standardized mean {mz:+.2f} sd {sz:.2f}")
