#!/usr/bin/env python3
"""Trials slower than the baseline (or failed), by the pick's tag and by
whether the session already held a setting within 2% of the optimum, read
from search_bench's SEARCH_TRACE lines (stderr). For the section "The risk
charge measured again" in docs/benchmarks.md:

  for s in 1 2 3; do
    SEARCH_SUITE_SEED=$s SEARCH_NO_TPE=1 SEARCH_TRACE=1 SEARCH_ONLY=tuned \\
      build/tests/search_bench --generalize 10 30 both 2> /tmp/trace_$s.txt > /dev/null
  done
  python3 tests/bench/not_kept/slower_trials.py /tmp/trace_[123].txt

Where the trace carries the pick's P(fits) and the expected gain (since
b7510b6), it also counts the picks by both, with how many ran out of
memory (the section "A stop before an OOM the models expect").
"""
import collections
import re
import sys

slow = collections.Counter()
total = collections.Counter()
by_pick = collections.Counter()  # (gain bucket, P(fits) < 0.5) -> picks
by_pick_oom = collections.Counter()
for path in sys.argv[1:]:
    base = None
    found = False
    for line in open(path):
        m = re.match(r'baseline ([0-9.]+)', line)
        if m:
            base = float(m.group(1))
            continue
        m = re.match(r'seed \d+ trial +(\d+) (\S+) +([0-9.]+) \(([0-9.]+) of best\).*GiB[^\[]*\[([^\]]*)\]', line)
        if not m or base is None:
            continue
        trial, status, step, of_best, tag = m.groups()
        if int(trial) == 1:
            found = False
        key = ('after' if found else 'before', tag)
        total[key] += 1
        slow[key] += status != 'ok' or float(step) > base
        if status == 'ok' and float(of_best) <= 1.02:
            found = True
        p = re.search(r'P\(fits\) +(-?[0-9.]+) gain +(-?[0-9.]+)', line)
        if p:
            p_fit, gain = float(p.group(1)), float(p.group(2))
            bucket = ('gain <= 0.0005' if gain <= 0.0005 else 'gain < 0.015' if gain < 0.015 else 'gain >= 0.015',
                      0 <= p_fit < 0.5)
            by_pick[bucket] += 1
            by_pick_oom[bucket] += status == 'oom'
for key in sorted(total):
    print(f'{key[0]:6s} {key[1]:24s} {slow[key]:6d} of {total[key]:6d} slower than the baseline or failed')
print(f'all: {sum(slow.values())} of {sum(total.values())}')
for (gain, unlikely) in sorted(by_pick):
    print(f'{gain:15s} P(fits) {"< 0.5 " if unlikely else ">= 0.5"} {by_pick[(gain, unlikely)]:6d} picks, '
          f'{by_pick_oom[(gain, unlikely)]:6d} out of memory')
