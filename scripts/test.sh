#!/usr/bin/env bash
# Installs test dependencies (and the zoo venv, .zoo-venv: scripts/zoo_venv.sh), builds cinfer (warnings as errors),
# runs every test suite, the model-coverage suite (label zoo) as a stage of its own, then rebuilds the CPU-only
# engine with AddressSanitizer + UndefinedBehaviorSanitizer and runs the unit, model, ONNX node and CLI tests again
# under them (not zoo: Release only), and fuzzes the input decoders (KServe requests, config.pbtxt, .npy, ONNX models)
# with libFuzzer, 60 s each, then reports the coverage their corpora reach (llvm-cov).
# Usage: scripts/test.sh            (the README's test command; .ci/run calls it)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
JOBS="$(nproc)"

stage_start=0
stage() { stage_start=$(date +%s); echo; echo "=== $1"; }
stage_end() { echo "=== $1 took $(( $(date +%s) - stage_start ))s"; }

stage "setup (apt packages, Python venv)"
scripts/setup.sh --no-build --test
stage_end "setup"

stage "zoo venv (torch, torchvision, transformers, onnxruntime: scripts/zoo_venv.sh)"
ZOO_PYTHON="$(scripts/zoo_venv.sh | tail -n 1)"
stage_end "zoo venv"

stage "build (Release, -Werror)"
# CINFER_CUDA=AUTO and the default CUDA architectures whatever an earlier configure of build/ (scripts/quickstart.sh:
# CPU only without a GPU, the visible GPU's architecture with one) left in its cache.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCINFER_WERROR=ON -DCINFER_CUDA=AUTO -UCMAKE_CUDA_ARCHITECTURES \
      -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" -DCINFER_ZOO_PYTHON="$ZOO_PYTHON" >/dev/null
cmake --build build -j"$JOBS"
stage_end "build"

stage "tests (all labels but zoo)"
ctest --test-dir build --output-on-failure -j"$JOBS" -LE zoo
stage_end "tests"

# Exports ~75 model files (cached in build/zoo-cache between runs) and runs each at 1 and 16 threads; the table of every
# model's load time, errors and latencies is printed after it.
stage "zoo: exported architectures and the trained MiniLM vs PyTorch and onnxruntime (label zoo, tests/zoo)"
zoo_status=0
ctest --test-dir build --output-on-failure -j"$JOBS" -L zoo || zoo_status=$?
cat build/zoo-cache/zoo-report.txt 2>/dev/null || true
stage_end "zoo"
[ "$zoo_status" -eq 0 ] || { echo "zoo tests failed"; exit "$zoo_status"; }

stage "sanitizer build (ASan + UBSan, CPU only)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCINFER_CUDA=OFF -DCINFER_SANITIZE=ON -DCINFER_WERROR=ON \
      -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build build-asan -j"$JOBS"
stage_end "sanitizer build"

stage "all tests under ASan/UBSan"
ctest --test-dir build-asan --output-on-failure -j"$JOBS" -LE zoo   # zoo: Release pass only (not registered here)
stage_end "sanitizer tests"
stage "fuzzing: kserve, config, npy, model (libFuzzer, fixed seed, 60 s each) + llvm-cov coverage"
scripts/fuzz.sh 60
stage_end "fuzzing"
echo
echo "all tests passed"
