#!/usr/bin/env bash
# The model search on development suites: the generated suite's distribution
# drawn with other generator seeds (SEARCH_SUITE_SEED; 44 fresh workloads
# each, both halves), for judging a search change on more workloads than the
# tuning half's 22 without looking at the held-out half (docs/benchmarks.md,
# "Development suites"). Runs `search_bench --generalize SEEDS 30 both` per
# suite with the environment it is given (X_* options) and prints each
# suite's lines and the totals over the suites: summed means of trials to
# within 2% (never = 31), hand-tuned shares of trials slower than the
# baseline summed, OOMs per session summed, hand-tuned workloads at <= 15%
# slower; then the targets met over all the halves' workloads (median <=
# 15 trials to within 2%, <= 1 OOM a session, >= 99% of the gain at 30
# trials). SEARCH_NOISE, SEARCH_BASELINE_RUNS and SEARCH_NO_GAIN_STOP pass
# through too (noisy sessions, the doctor's repeats, no expected-gain
# stop: search_bench's usage). Usage:
#   [X_RISK=0 ...] tests/bench/dev_suites.sh [BUILD_DIR] [SEEDS=10] [SUITE_SEED...=1 2 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
seeds=${2:-10}
shift $(( $# > 2 ? 2 : $# ))
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(1 2 3)
case $seeds in '' | *[!0-9]* | 0) echo "SEEDS must be a positive integer, got '$seeds'" >&2; exit 2 ;; esac
for s in "${suites[@]}"; do
  case $s in '' | *[!0-9]* | 0) echo "SUITE_SEED must be a positive integer, got '$s'" >&2; exit 2 ;; esac
done
bench="$build/tests/search_bench"
[ -x "$bench" ] || { echo "$bench not found: build with -DINFRARSI_BUILD_TESTS=ON" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for s in "${suites[@]}"; do
  SEARCH_SUITE_SEED=$s SEARCH_NO_TPE=1 "$bench" --generalize "$seeds" 30 both > "$work/$s.txt" 2>&1 ||
    { echo "search_bench failed on suite seed $s:" >&2; tail -20 "$work/$s.txt" >&2; exit 1; }
  echo "suite seed $s:"
  grep -E 'targets met|^Mean trials' "$work/$s.txt" | sed 's/^/  /'
done
cat "$work"/*.txt | awk '
  /summed over the workloads:/ { for (i = 1; i <= NF; i++) if ($i == "workloads:") { m += $(i + 1); halves++ } }
  /hand-tuned share slower/ { for (i = 1; i <= NF; i++) if ($i == "slower") { w += $(i + 1) + 0 } }
  /OOMs per session/ { for (i = 1; i <= NF; i++) if ($i == "session") { o += $(i + 1) + 0 } }
  /hand-tuned, <= 15% of trials slower than the baseline/ {
    for (i = 1; i <= NF; i++) if ($i == "baseline") { split($(i + 1), f, "/"); met += f[1]; n += f[2] }
  }
  /targets met: median <= 15 trials/ {
    for (i = 1; i <= NF; i++) {
      if ($i == "trials" && $(i + 1) ~ /\//) { split($(i + 1), f, "/"); med += f[1]; all += f[2] }
      if ($i == "1" && $(i - 1) == "<=" && $(i + 1) ~ /\//) { split($(i + 1), f, "/"); oom += f[1] }
      if ($i == "gain" && $(i + 1) ~ /\//) { split($(i + 1), f, "/"); gain += f[1] }
    }
  }
  END {
    printf "Over %d halves: summed means of trials to within 2%% %.1f; hand-tuned shares slower summed %.2f; ", halves, m, w
    printf "OOMs per session summed %.1f; hand-tuned workloads at <= 15%% slower %d of %d\n", o, met, n
    printf "Targets met over the %d workloads: median <= 15 trials %d, <= 1 OOM a session %d, >= 99%% of the gain %d\n", all, med, oom, gain
  }'
