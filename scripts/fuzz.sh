#!/usr/bin/env bash
# Fuzzes cinfer's input decoders with libFuzzer (clang, ASan + UBSan, CPU-only build), then measures the line and
# function coverage the corpora reach with a clang source-coverage build (llvm-profdata + llvm-cov).
# Targets (tests/fuzz/fuzz_<name>.c): kserve (KServe v2 JSON + binary infer request decoder), config
# (config.pbtxt parser), npy (.npy reader), model (ONNX loader, planner and CPU run).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   SECONDS per target (default 60; scripts/test.sh uses 60),
#        fixed seed (-seed=1); FUZZ_COVERAGE=0 skips the coverage report; SECONDS=0 only reports the coverage
#        of the corpora left in build-fuzz/corpus/ by an earlier run.
# Each target starts from its committed seeds (tests/fuzz/corpus/<name>/; the model target also from the
# generated corpus of tests/fuzz/make_corpus.py) and grows build-fuzz/corpus/<name>/. A crash stops the script
# with the input saved in build-fuzz/findings/: commit it as tests/fuzz/corpus/<name>/crash-<what> (ctest's
# fuzz_replay_<name> replays it from then on) and fix the bug. Summary: build-fuzz/summary.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(kserve config npy model)
JOBS="$(nproc)"
LLVM_BIN=/usr/lib/llvm-14/bin

CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCINFER_CUDA=OFF -DCINFER_FUZZ=ON \
      -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build build-fuzz -j"$JOBS" --target "${TARGETS[@]/#/fuzz_}"
rm -rf build-fuzz/findings && mkdir -p build-fuzz/findings build-fuzz/logs
[ "$SECONDS_PER_TARGET" = 0 ] && FUZZ_TARGETS=() || FUZZ_TARGETS=("${TARGETS[@]}")
for t in "${FUZZ_TARGETS[@]}"; do rm -rf "build-fuzz/corpus/$t" "build-fuzz/logs/$t.log"; done

# A fuzzed model or .npy may declare terabyte tensors: allocations over 2 GiB fail (NULL) so cinfer must refuse
# the input with an error, which is what is being tested, rather than the fuzzer counting the request as a bug.
export ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=2048:detect_leaks=1
SUMMARY=build-fuzz/summary.txt
printf "%-8s %10s %8s %8s %7s %s\n" target executions exec/s corpus edges result > "$SUMMARY"
for t in "${FUZZ_TARGETS[@]}"; do
    mkdir -p "build-fuzz/corpus/$t"
    cp tests/fuzz/corpus/"$t"/* "build-fuzz/corpus/$t/"
    max_len=4096
    if [ "$t" = model ]; then
        .venv/bin/python tests/fuzz/make_corpus.py "build-fuzz/corpus/$t" >/dev/null
        max_len=16384
    fi
    echo "=== fuzz_$t: ${SECONDS_PER_TARGET}s, seed 1, $(ls "build-fuzz/corpus/$t" | wc -l) seeds"
    log="build-fuzz/logs/$t.log"
    rc=0
    "build-fuzz/tests/fuzz_$t" -seed=1 -max_total_time="$SECONDS_PER_TARGET" -max_len=$max_len -timeout=20 \
        -rss_limit_mb=6144 -malloc_limit_mb=4096 -artifact_prefix="build-fuzz/findings/$t-" -print_final_stats=1 \
        "build-fuzz/corpus/$t" > "$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    result=ok; [ $rc -ne 0 ] && result="CRASH (exit $rc)"
    printf "%-8s %10s %8s %8s %7s %s\n" "$t" "${execs:-?}" "${rate:-?}" "$(ls "build-fuzz/corpus/$t" | wc -l)" \
        "${edges:-?}" "$result" | tee -a "$SUMMARY"
    if [ $rc -ne 0 ]; then
        tail -60 "$log"
        echo "fuzz_$t found a crash; the input is in build-fuzz/findings/ (commit it as tests/fuzz/corpus/$t/crash-<what>)"
        exit 1
    fi
done

if [ "${FUZZ_COVERAGE:-1}" != 0 ]; then
    # Coverage variant: the same targets linked with the replay driver, built with clang's source coverage.
    CC=clang cmake -S . -B build-fuzz-cov -DCMAKE_BUILD_TYPE=Debug -DCINFER_CUDA=OFF \
          -DCMAKE_C_FLAGS="-fprofile-instr-generate -fcoverage-mapping" \
          -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
    cmake --build build-fuzz-cov -j"$JOBS" --target $(printf 'fuzz_%s_replay ' "${TARGETS[@]}")
    echo | tee -a "$SUMMARY"
    echo "coverage of each target's source files by its corpus (llvm-cov report; lines, functions)" | tee -a "$SUMMARY"
    for t in "${TARGETS[@]}"; do
        case $t in
            kserve) files=(src/serve/kserve_codec.c src/serve/shm.c) ;;
            config) files=(src/serve/config_text.c src/serve/config_model.c) ;;
            npy) files=(src/core/npy.c) ;;
            model) files=(src/onnx/onnx_loader.c) ;;
        esac
        prof="build-fuzz-cov/$t"
        rm -f "$prof".profraw "$prof".profdata
        LLVM_PROFILE_FILE="$prof.profraw" "build-fuzz-cov/tests/fuzz_${t}_replay" "build-fuzz/corpus/$t" >/dev/null 2>&1 || true
        "$LLVM_BIN/llvm-profdata" merge -sparse "$prof.profraw" -o "$prof.profdata"
        echo "--- $t ($(ls "build-fuzz/corpus/$t" | wc -l) inputs)" | tee -a "$SUMMARY"
        "$LLVM_BIN/llvm-cov" report "build-fuzz-cov/tests/fuzz_${t}_replay" -instr-profile="$prof.profdata" \
            "${files[@]/#/$ROOT/}" | awk '{ printf "%-40s lines %s of %s (%s)  functions %s of %s (%s)\n", $1, $8-$9, $8, $10, $5-$6, $5, $7 }' \
            | sed -n '3,$p' | grep -v '^-' | tee -a "$SUMMARY"
    done
fi
echo
cat "$SUMMARY"
