#!/usr/bin/env bash
# Installs every Debian package InfraRSI needs to build, test and run its demo.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libsqlite3-dev libeigen3-dev libspdlog-dev libfmt-dev
  libgit2-dev libgtest-dev libgmock-dev libyaml-cpp-dev libcli11-dev
  libcpp-httplib-dev libssl-dev  # the optional LLM priors client
  python3  # the harness and the reward-hack corpus tests
  python3-optuna  # tests/bench/tpe_bench.py: Optuna's TPE as a baseline
  # deploy/examples/tiny-gpt, the real training job the e2e test tunes;
  # OpenBLAS gives Debian's torch a fast CPU BLAS instead of the reference one
  python3-torch libopenblas0-pthread
  clang libclang-rt-14-dev  # tests/fuzz: libFuzzer targets, run by ctest (fuzz_smoke)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install_deps: installed ${missing[*]}"
