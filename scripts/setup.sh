#!/usr/bin/env bash
# Installs what cinfer needs on Debian 12 (apt packages, the project's Python venv) and builds it.
# Usage: scripts/setup.sh [--no-build] [--test]   Idempotent: skips what is already there.
#   --no-build  install only (scripts/quickstart.sh and scripts/test.sh build themselves)
#   --test      also the test-only tools: requirements-test.txt in the venv (onnxruntime, pytest, tritonclient, ...),
#               clang with its fuzzer/sanitizer runtimes and OpenMP (scripts/fuzz.sh), Triton's perf_analyzer in
#               .deps/perf_analyzer (scripts/perf_analyzer.sh; needs libb64-0d), and Prometheus (promtool + the
#               server) for the operations-kit tests (tests/deploy)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

APT_PACKAGES=(build-essential cmake pkg-config libprotobuf-c-dev protobuf-c-compiler libopenblas-openmp-dev
              libmicrohttpd-dev libjansson-dev zlib1g-dev python3 python3-venv python3-pip)
for arg in "$@"; do
    # prometheus: promtool and the server for tests/deploy (alert rule unit tests, a live scrape of cinfer-server)
    # llvm-14: llvm-profdata-14 + llvm-cov-14 for scripts/fuzz.sh's coverage report
    # valgrind: memcheck over a short server run (ctest server_valgrind)
    [ "$arg" = "--test" ] && APT_PACKAGES+=(clang libclang-rt-14-dev libomp-dev libb64-0d prometheus llvm-14 valgrind)
done
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing apt packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The venv: requirements.txt always (onnx, whose onnx.proto the ONNX decoder is generated from, and numpy: what the
# build and scripts/quickstart.sh need); requirements-test.txt too with --test (onnxruntime, pytest, the server and
# operations-kit test tools). A stamp per set holds the pins last installed, so a changed pin installs again and a
# quickstart venv grows into a test venv without starting over.
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating Python venv in .venv"
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
fi
if ! cmp -s requirements.txt .venv/.requirements.stamp; then
    echo "setup: installing requirements.txt into .venv"
    .venv/bin/pip install -q -r requirements.txt
    cp requirements.txt .venv/.requirements.stamp
fi
if [[ " $* " == *" --test "* ]] &&
   ! cat requirements.txt requirements-test.txt | cmp -s - .venv/.requirements-test.stamp; then
    echo "setup: installing requirements-test.txt into .venv"
    .venv/bin/pip install -q -r requirements-test.txt
    cat requirements.txt requirements-test.txt >.venv/.requirements-test.stamp
fi

# perf_analyzer (server benchmark and its CI sweep) lives outside .venv: see scripts/perf_analyzer.sh.
if [[ " $* " == *" --test "* ]]; then
    scripts/perf_analyzer.sh --install
fi

if [[ " $* " != *" --no-build "* ]]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
    cmake --build build -j"$(nproc)"
fi
