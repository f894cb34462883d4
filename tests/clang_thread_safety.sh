#!/usr/bin/env bash
# clang's thread-safety analysis (-Wthread-safety, errors) over the sources
# whose locks are annotated: every unit of core/ and base/ that declares a
# mutex, guards a field or requires a lock, and every file of the session
# manager. A syntax-only pass (GCC builds the binaries): it fails when a
# guarded field is touched, or a ...Locked method called, without its lock.
# Usage: tests/clang_thread_safety.sh SOURCE_DIR GENERATED_PROTO_DIR
# Exit 77 (ctest: skipped) when clang++ is not installed.
set -euo pipefail
src=$1
gen=$2
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then
  echo "SKIP: clang++ is not installed (deploy/install_deps.sh --tests installs it)"
  exit 77
fi
cd "$src"
files=()
for h in $(grep -lE 'absl/synchronization/mutex.h|ABSL_GUARDED_BY|LOCKS_REQUIRED' core/*.h base/*.h); do
  cc=${h%.h}.cc
  [ -f "$cc" ] && files+=("$cc")
done
files+=(core/session_manager_*.cc)
echo "checking ${#files[@]} files: ${files[*]}"
printf '%s\n' "${files[@]}" | sort -u |
  xargs -P 2 -I{} "$cxx" -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety \
    -Wno-unknown-warning-option -I"$src" -I"$gen" -isystem /usr/include/eigen3 \
    $(pkg-config --cflags libgit2) {}
echo "thread-safety analysis: clean"
