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
memory and how many were slower than the baseline or failed, and names
the workloads and trials behind the slower ones at no expected gain (the
sections "A stop before an OOM the models expect" and "Where a
hand-tuned session's slower trials go now"; the totals before and after
a session held a setting within 2% of the optimum are the latter's).
"""
import collections
import re
import sys

slow = collections.Counter()
total = collections.Counter()
by_pick = collections.Counter()  # (gain bucket, P(fits) < 0.5) -> picks
by_pick_oom = collections.Counter()
by_pick_slow = collections.Counter()
slow_at_no_gain = collections.Counter()  # (workload, trial) -> sessions
for path in sys.argv[1:]:
    base = None
    found = False
    workload = None
    for line in open(path):
        m = re.match(r'(g\d+-\S+): top', line)
        if m:
            workload = m.group(1)
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
        slower = status != 'ok' or float(step) > base
        slow[key] += slower
        if status == 'ok' and float(of_best) <= 1.02:
            found = True
        p = re.search(r'P\(fits\) +(-?[0-9.]+) gain +(-?[0-9.]+)', line)
        if p:
            p_fit, gain = float(p.group(1)), float(p.group(2))
            bucket = ('gain <= 0.0005' if gain <= 0.0005 else 'gain < 0.015' if gain < 0.015 else 'gain >= 0.015',
                      0 <= p_fit < 0.5)
            by_pick[bucket] += 1
            by_pick_oom[bucket] += status == 'oom'
            by_pick_slow[bucket] += slower
            if slower and gain <= 0.0005:
                slow_at_no_gain[(workload, int(trial))] += 1
for key in sorted(total):
    print(f'{key[0]:6s} {key[1]:24s} {slow[key]:6d} of {total[key]:6d} slower than the baseline or failed')
print(f'all: {sum(slow.values())} of {sum(total.values())}')
for when in ('before', 'after'):
    keys = [k for k in total if k[0] == when]
    print(f'{when}: {sum(slow[k] for k in keys)} of {sum(total[k] for k in keys)}')
for (gain, unlikely) in sorted(by_pick):
    print(f'{gain:15s} P(fits) {"< 0.5 " if unlikely else ">= 0.5"} {by_pick[(gain, unlikely)]:6d} picks, '
          f'{by_pick_oom[(gain, unlikely)]:6d} out of memory, {by_pick_slow[(gain, unlikely)]:6d} slower or failed')
for (workload, trial), n in sorted(slow_at_no_gain.items()):
    print(f'slower at gain <= 0.0005: {workload} trial {trial} in {n} sessions')
