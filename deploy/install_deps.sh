#!/usr/bin/env bash
# Installs the Debian packages InfraRSI needs: to build it and run it (the
# demo, the server, the agent, the CLI), and with --tests what its test
# suite needs besides (torch for the real training job, Optuna, clang's
# fuzzer runtime, Python's gRPC for the Python client, systemd-analyze,
# Chromium and ChromeDriver for the dashboard's browser test).
# Idempotent: packages already present are skipped by apt.
# Usage: deploy/install_deps.sh [--tests]
set -euo pipefail

tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "install_deps: unknown argument '$arg' (expected --tests)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  build-essential cmake pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libre2-dev
  libabsl-dev libsqlite3-dev libeigen3-dev libspdlog-dev libfmt-dev
  libgit2-dev libgtest-dev libgmock-dev libyaml-cpp-dev libcli11-dev
  libcpp-httplib-dev libssl-dev  # the optional LLM priors client, the metrics endpoint
  python3  # the harness the training job runs under
)
TEST_PACKAGES=(
  python3-optuna  # tests/bench/tpe_bench.py: Optuna's TPE as a baseline
  # deploy/examples/tiny-gpt, the real training job the e2e test tunes;
  # OpenBLAS gives Debian's torch a fast CPU BLAS instead of the reference one
  python3-torch libopenblas0-pthread
  clang libclang-rt-14-dev  # tests/fuzz: libFuzzer targets, run by ctest (fuzz_smoke)
  python3-grpcio python3-protobuf  # client/python, tested against a real server
  systemd  # systemd-analyze verify on deploy/systemd/
  slurmctld slurmd slurm-client munge  # deploy/slurm/local-cluster.sh: a two-node Slurm here
  chromium chromium-driver  # tests/integration/dashboard_browser_test: the dashboard in a real browser
)
missing_of() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(missing_of "${PACKAGES[@]}")
test_missing=()
if [ "$tests" -eq 1 ]; then mapfile -t test_missing < <(missing_of "${TEST_PACKAGES[@]}"); fi
if [ ${#missing[@]} -eq 0 ] && [ ${#test_missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  echo "install_deps: installed ${missing[*]}"
fi
# What only tests need: a package that cannot be installed here makes the
# tests that need it skip (saying so), not the build fail.
if [ ${#test_missing[@]} -gt 0 ]; then
  if $SUDO apt-get install -y -qq --no-install-recommends "${test_missing[@]}"; then
    echo "install_deps: installed ${test_missing[*]}"
  else
    # One at a time, so that one missing package skips only its own tests.
    for p in "${test_missing[@]}"; do
      if ! $SUDO apt-get install -y -qq --no-install-recommends "$p"; then
        echo "install_deps: could not install $p; the tests that need it will skip" >&2
      fi
    done
  fi
fi
