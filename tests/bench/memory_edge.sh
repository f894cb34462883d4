#!/usr/bin/env bash
# Where the textbook memory estimate hides a generated workload's optimum:
# for each workload of the development suites named (SEARCH_SUITE_SEED, both
# halves), the optimum's measured peak against the estimate scaled by the
# baseline's measured peak (peak_base x est_opt / est_base: what the memory
# model predicts for it before any run changes a knob it does not model).
# Prints each workload whose optimum fits the device while that prediction
# does not (the search's OOM caution holds it back), and the spread of the
# ratio (measured / predicted at the optimum) over all, and how many
# workloads of each kind miss the median-15 or 99%-of-the-gain target (and
# of the others' misses, how many are MoE) in the same run's sessions.
# Reads what search_bench --generalize prints with SEARCH_TRACE. SEEDS
# (default 1) sessions a workload; the figures in docs/benchmarks.md are
# SEEDS=10 (about four minutes). Usage:
#   [SEEDS=10] tests/bench/memory_edge.sh [BUILD_DIR] [SUITE_SEED...=1 2 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
shift $(( $# > 1 ? 1 : $# ))
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(1 2 3)
for s in "${suites[@]}"; do
  case $s in '' | *[!0-9]* | 0) echo "SUITE_SEED must be a positive integer, got '$s'" >&2; exit 2 ;; esac
done
seeds=${SEEDS:-1}
case $seeds in '' | *[!0-9]* | 0) echo "SEEDS must be a positive integer, got '$seeds'" >&2; exit 2 ;; esac
bench="$build/tests/search_bench"
[ -x "$bench" ] || { echo "$bench not found: build with -DINFRARSI_BUILD_TESTS=ON" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for s in "${suites[@]}"; do
  SEARCH_TRACE=1 SEARCH_SUITE_SEED=$s SEARCH_NO_TPE=1 "$bench" --generalize "$seeds" 30 both \
    > "$work/rows" 2> "$work/trace" || { echo "search_bench failed on suite seed $s:" >&2; tail -20 "$work/trace" >&2; exit 1; }
  grep -E ': top |^baseline ' "$work/trace" | sed "s/^/$s /"
  # Per-workload rows: "gNN-... knobs gain reached med OOM @share ...".
  awk -v s="$s" '/^g[0-9][0-9]-/ && NF > 10 { print s, "row", $1 ":", ($5 + 0 > 15 || $7 + 0 < 99.0) }' "$work/rows"
done | awk -v seeds="$seeds" '
  # "S NAME: top T (R of best) peak P est E of C GiB: diff"; the first is the optimum.
  $3 == "top" && !(($1 " " $2) in seen) {
    seen[$1 " " $2] = 1; key = $1 " " $2
    for (i = 1; i <= NF; i++) {
      if ($i == "peak") p = $(i + 1)
      if ($i == "est") e = $(i + 1)
      if ($i == "of" && $(i + 2) == "GiB:") c = $(i + 1)
    }
    diff = $0; sub(/.*GiB: /, "", diff)
    top_peak[key] = p; top_est[key] = e; cap[key] = c; what[key] = diff; last = key
  }
  # "S row NAME: MISSED", after the trace lines of its suite.
  $2 == "row" { missed[$1 " " $3] = $4; next }
  # "S baseline T (R of best) peak P GiB est E: {...}", after its workload.
  $2 == "baseline" {
    for (i = 1; i <= NF; i++) {
      if ($i == "peak") bp = $(i + 1)
      if ($i == "est") be = $(i + 1) + 0
    }
    if (be <= 0) next
    pred = bp * top_est[last] / be
    ratio[++n] = top_peak[last] / pred
    if (top_peak[last] <= cap[last] && pred > cap[last]) {
      ++hidden
      is_hidden[last] = 1
      printf "suite %s optimum %.1f GiB, predicted %.1f, device %.1f: %s\n", last, top_peak[last], pred, cap[last], what[last]
    }
  }
  END {
    if (n == 0) { print "no workload with a memory estimate"; exit 1 }
    for (i = 2; i <= n; i++) {  # insertion sort (mawk has no asort)
      v = ratio[i]
      for (j = i - 1; j >= 1 && ratio[j] > v; j--) ratio[j + 1] = ratio[j]
      ratio[j + 1] = v
    }
    printf "%d of %d optima fit the device but are predicted not to; measured / predicted at the optimum: p10 %.2f, median %.2f, p90 %.2f\n",
      hidden, n, ratio[int(n * 0.1) + 1], ratio[int(n / 2) + 1], ratio[int(n * 0.9)]
    for (w in missed) {
      if (w in is_hidden) { miss_h += missed[w] } else { miss_o += missed[w]; if (missed[w] && w ~ /-moe-/) ++miss_o_moe }
    }
    printf "missing the median-15 or 99%% target (%d seeds): %d of the %d hidden, %d of the other %d (%d of those MoE)\n",
      seeds, miss_h, hidden, miss_o, n - hidden, miss_o_moe
  }'
