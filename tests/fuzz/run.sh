#!/bin/sh
# Builds the fuzzers with clang (tests/fuzz/CMakeLists.txt) and runs each for
# SECONDS on its corpus in the repo; first replays every crash ever found
# (tests/fuzz/crashes/<fuzzer>/), which must now pass. New inputs go to a
# scratch corpus, so the repo is never modified; a crash fails the run and
# names the file to add to crashes/.
# Usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$1
secs=${2:-20}
CXX=${FUZZ_CXX:-clang++} cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 >/dev/null
for f in spec patch metrics report llm; do
  bin="$build/fuzz_$f"
  if ls "$here/crashes/$f"/* >/dev/null 2>&1; then
    "$bin" -runs=0 "$here"/crashes/$f/* >/dev/null 2>&1 || { echo "fuzz_$f: a recorded crash is back"; exit 1; }
  fi
  scratch="$build/corpus-$f"
  mkdir -p "$scratch" "$build/artifacts-$f"
  if ! "$bin" -max_total_time="$secs" -print_final_stats=1 -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
       -artifact_prefix="$build/artifacts-$f/" "$scratch" "$here/corpus/$f" > "$build/fuzz_$f.log" 2>&1; then
    echo "fuzz_$f found a crash: $(ls "$build/artifacts-$f"); log: $build/fuzz_$f.log"
    tail -30 "$build/fuzz_$f.log"
    exit 1
  fi
  echo "fuzz_$f: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$build/fuzz_$f.log" || tail -1 "$build/fuzz_$f.log")"
done
