#!/usr/bin/env bash
# Builds the libFuzzer target with clang (ASan + UBSan) and fuzzes model loading and running from a seed
# corpus. Usage: scripts/fuzz.sh [RUNS]   (default 20000 runs, fixed seed, so CI runs are repeatable)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RUNS="${1:-20000}"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCINFER_CUDA=OFF -DCINFER_FUZZ=ON \
      -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_model
rm -rf build-fuzz/corpus build-fuzz/findings && mkdir -p build-fuzz/findings
.venv/bin/python tests/fuzz/make_corpus.py build-fuzz/corpus
# A fuzzed model may declare terabyte tensors: allocations over 2 GiB fail (NULL) so cinfer must refuse the
# model with an error, which is what is being tested, rather than the fuzzer counting the request as a bug.
ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=2048:detect_leaks=1 \
  build-fuzz/tests/fuzz_model -seed=1 -runs="$RUNS" -max_len=16384 -timeout=20 -rss_limit_mb=6144 -malloc_limit_mb=4096 \
  -artifact_prefix=build-fuzz/findings/ -print_final_stats=1 build-fuzz/corpus
