#!/usr/bin/env python3
"""Reads `SEARCH_TRACE=1 search_bench --generalize SEEDS BUDGET HALF` output on
stdin and prints the workloads whose seeds ran the same session, trial for
trial (the settings picked, in order). Usage:
  SEARCH_NO_TPE=1 SEARCH_TRACE=1 build/tests/search_bench --generalize 3 30 tune 2>&1 |
    python3 tests/bench/same_sessions.py
"""
import collections
import re
import sys

current = None
sessions = collections.defaultdict(lambda: collections.defaultdict(list))
for line in sys.stdin:
    m = re.match(r"^(g\d\d-\S+): top", line)
    if m:
        current = m.group(1)
        continue
    m = re.match(r"^seed (\d+) trial\s+\d+ \S+\s+\S+ .*\[.*?\] (.*)$", line)
    if m and current:
        sessions[current][m.group(1)].append(m.group(2).strip())
same = [w for w, by_seed in sessions.items() if len({tuple(v) for v in by_seed.values()}) == 1]
print(f"{len(sessions)} workloads; {len(same)} whose seeds ran the same session: {' '.join(same)}")
