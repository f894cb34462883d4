#!/usr/bin/env python3
"""Where a proposal's time goes, from perf's DWARF call stacks.

Reads `perf script -F comm,tid,ip,sym` output of a search_bench --latency
run and prints the share of the proposing thread's samples (those under
ModelOptimizer::Propose) by the frame below Propose (below the Models
constructor where the fits run), and the fits' second thread's samples
by the fit they are in. Used by docs/benchmarks.md ("The kept history's
space indices"):

  SEARCH_NO_TPE=1 LATENCY_N=20 perf record -e cpu-clock -F 1000 \\
      --call-graph dwarf,16384 -o perf.data build/tests/search_bench --latency 2000
  perf script -i perf.data -F comm,tid,ip,sym > perf.txt
  tests/bench/not_kept/perf_propose.py perf.txt
"""
import collections
import sys


def samples(path):
    tid, stack = None, None
    for line in open(path):
        if line.startswith('search_bench'):
            if stack is not None:
                yield tid, stack
            tid, stack = line.split()[1], []
        elif line.strip():
            parts = line.strip().split(None, 1)
            stack.append(parts[1] if len(parts) > 1 else '?')
    if stack is not None:
        yield tid, stack


def main():
    all_samples = list(samples(sys.argv[1]))
    main_tid = collections.Counter(t for t, _ in all_samples).most_common(1)[0][0]
    proposing = [s for t, s in all_samples if any('ModelOptimizer::Propose' in f for f in s)]
    aside = [s for t, s in all_samples if t != main_tid and any('Models::Models' in f for f in s)
             and not any('ModelOptimizer::Propose' in f for f in s)]
    by_part = collections.Counter()
    for s in proposing:
        ctor = [i for i, f in enumerate(s) if 'Models::Models' in f]
        if ctor:
            j = ctor[-1] - 1
            while j > 0 and (s[j].startswith('std::') or ('inlined' in s[j] and 'lambda' not in s[j])):
                j -= 1
            by_part['Models ctor > ' + s[j][:90]] += 1
        else:
            i = [k for k, f in enumerate(s) if 'ModelOptimizer::Propose' in f][-1]
            by_part[s[i - 1][:100] if i > 0 else 'self'] += 1
    print('proposing thread: %d samples; second thread (fits): %d' % (len(proposing), len(aside)))
    for part, n in by_part.most_common(15):
        print('%6.1f%%  %s' % (100.0 * n / len(proposing), part))
    by_fit = collections.Counter(next((f[:80] for f in s if 'Fit' in f), s[0][:80]) for s in aside)
    print('second thread:')
    for part, n in by_fit.most_common(5):
        print('%6.1f%%  %s' % (100.0 * n / max(1, len(aside)), part))


if __name__ == '__main__':
    main()
