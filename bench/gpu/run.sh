#!/usr/bin/env bash
# Everything a GPU check needs, in one call on the lent H200 (device tool, repository root, carry [".deps"]).
# Unpacks .deps/gpu-bundle.tar.xz (bench/gpu/package.sh makes it here), points the loader at the carried
# libraries and at PyTorch's cuDNN, then runs the stage(s) named:
#   tests     cinfer gpus, the CUDA pytest suite (graphs, precisions, determinism too), the model tests, the
#             precision and fusion unit tests and the ONNX node tests on cuda, the
#             differential op tests (CUDA vs CPU with guard bytes)
#   ops       the ONNX node tests and the differential op tests on cuda (as in "tests"), OPS_FILTER (a regex) narrowing
#             both to the cases it matches
#   models    ResNet-50 and BERT-base exported here, cinfer on CUDA vs onnxruntime (bench/gpu/check_models.py)
#   alloc     allocator benchmark: a ResNet-50 batch-32 allocation trace replayed through the caching allocator
#             and through cudaMalloc/cudaFree on two streams (bench/gpu/bench_alloc.c)
#   sanitize  the CUDA pytest suite, the precision/fusion unit tests and the model tests on cuda under compute-sanitizer
#             memcheck; SANITIZE_OPS=1 adds the differential op tests (FILTER env narrows their cases), SANITIZE_SERVER=1
#             the server's GPU protocol, batching and fault suites (every server process under memcheck)
#   compare   cinfer vs PyTorch eager and CUDA Graphs side by side (bench/gpu/compare_pytorch.py; models exported
#             here): by default ResNet-50 b1,8,64,256, BERT-base b1,8,32,128, DLRM-style b1,128,2048 and the 2048^2
#             image b1 (+ stream vs copy loop), fp32 and fp16, device-resident and pinned rows, ResNet-50 load time,
#             fp16/bf16 agreement: ~4-6 min. COMPARE_ARGS replaces the options (e.g. "--quick": the goal rows only);
#             tables in $OUT/compare.log, everything in $OUT/compare/compare.json
#   server    cinfer-server on the GPU (default placement: one instance per GPU): the protocol, batching, OOM,
#             fault, precision, Triton-habits, shared-memory, batch-isolation and reload suites through tritonclient (real OOM under a memory limit, a poisoned
#             device turning liveness to 400), and the real NVML metrics against nvidia-smi
#   profile   for each PROFILE_SPECS entry model:batch:precision (default resnet50:64:fp16 bert:32:fp16): the
#             caller-stream timing check (bench/gpu/check_timing.py), cinfer bench --profile (per-op table) and plain
#             cinfer bench (host api, wall clock)
#   algos     cinfer bench at ALGO_SPECS with cuDNN timing on/off and channels-last on/off, every algorithm choice
#             logged (CINFER_CUDNN_LOG=1): which convolution algorithms a batch size gets, and what they cost
#   ncu       Nsight Compute sections of one launch of the kernels matching NCU_KERNEL in cinfer bench (PROFILE_SPECS),
#             its report and a per-SASS-instruction CSV (stall samples) beside the log
#   trace     per-kernel GPU time of cinfer beside PyTorch eager for the same specs (default resnet50:1:fp16
#             bert:128:fp16 dlrm:128:fp32; bench/gpu/kernel_trace.py, torch.profiler) into kernel_trace.log
#   overlap   copy/compute overlap with CUDA event timestamps (session option timeline): the image from page-locked
#             memory chunked and whole, ResNet-50 fp16 on one and two lanes, PyTorch's round trip timed with events
#             beside them (bench/gpu/overlap_timeline.py)
#   soak      cinfer-server with ResNet-50 and BERT-base on one GPU under client load, each model reloaded, unloaded
#             and loaded again in turn every SOAK_RELOAD_EVERY s (5) for SOAK_SECONDS (480): bench/soak/soak.py's
#             reload mode (zero failed requests, descriptors and GPU allocator bytes back to baseline), gpu_soak.json
#   startup   cinfer-server start to ready with ResNet-50 on the GPU, with the devices started beside the repository
#             load (default) and without (CINFER_SERVER_EARLY_DEVICES=0), alternated (bench/gpu/server_start.py)
#   outputs   cinfer-server with the image model on GPU 0: the engine phase per request with a lane's outputs in
#             page-locked memory (default) and malloc'd (--pinned-output-memory 0) (bench/gpu/server_outputs.py)
#   scale     cinfer-server + ResNet-50 fp16 under perf_analyzer with system shared memory, every visible GPU and then
#             GPU 0 only, plus the engine alone at the formed batch size (bench/gpu/server_scale.py; SCALE_ARGS adds
#             options; carry .deps/perf-analyzer.tar.xz too): the two-GPU scaling run and the server's H200 goal
#   smoke     cinfer gpus, the CUDA pytest suite, the precision/fusion unit tests on cuda and the cinfer tool's tests (the
#             first minutes of tests)
#   verify    smoke plus the PyTorch rows the latest changes moved and the overlap timeline (see the stage; "scale" with
#             SCALE_ARGS="--gpu-wait block" on nvidia-h200-x2 has still never run)
# Logs go to $OUT/<stage>.log; a summary table is printed last.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT=${OUT:-/tmp/cinfer-gpu-out}
mkdir -p "$OUT"
WORK=$(mktemp -d)
tar -C "$WORK" -xJf .deps/gpu-bundle.tar.xz
B="$WORK/bundle"
CUDNN_DIR=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/bin:$B/lib:${CUDNN_DIR}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export CINFER_LIB="$B/bin/libcinfer.so" CINFER_CLI="$B/bin/cinfer" PYTHONDONTWRITEBYTECODE=1
PY=python3
if ! $PY -c "import pytest" 2>/dev/null; then
    $PY -m pip install -q --no-index --target "$WORK/py" "$B"/wheels/*.whl >/dev/null 2>&1
    export PYTHONPATH="$WORK/py:${PYTHONPATH:-}"
fi
declare -a SUMMARY
stage() { # name, command...
    local name=$1; shift
    local t0=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [ "$(stat -c %s "$OUT/$name.log")" -gt 4000000 ]; then # keep logs small enough to come back
        tail -c 2000000 "$OUT/$name.log" >"$OUT/$name.log.tail" && mv "$OUT/$name.log.tail" "$OUT/$name.log"
    fi
    SUMMARY+=("$(printf '%-22s rc=%-3s %5ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$OUT/$name.log" | cut -c1-110)")")
}
# TPY: the Python with PyTorch (the machine's own, else /opt/torch's), looked up once by the stages that need it
TPY=""
torch_python() {
    [ -n "$TPY" ] && return
    TPY=$PY; $TPY -c "import torch, torchvision, transformers" 2>/dev/null || TPY=/opt/torch/.venv/bin/python3
}
export_model() {
    torch_python
    [ -f "$WORK/compare-models/$1.onnx" ] || $TPY bench/gpu/models.py "$WORK/compare-models" "$1" >/dev/null 2>&1
}
# the server suites' Python 3.12 packages (tritonclient) and the server binary, for the stages that start servers
server_env() {
    $PY -m pip install -q --no-index --no-deps --target "$WORK/py312" "$B"/wheels312/*.whl >/dev/null 2>&1
    export PYTHONPATH="$WORK/py312:${PYTHONPATH:-}" CINFER_SERVER="$B/bin/cinfer-server" \
           CINFER_FAKE_NVML="$B/fake_nvml/libnvidia-ml.so"
}
op_tests() { # the ONNX node tests and the differential op tests on cuda, OPS_FILTER narrowing both
    stage node_tests_cuda $PY tests/onnx_node/run_node_tests.py --device cuda --list-failures ${OPS_FILTER:+--filter "$OPS_FILTER"}
    stage diff_ops $PY tests/ops/diff_ops.py --list ${OPS_FILTER:+--filter "$OPS_FILTER"}
}
UNIT_CUDA_TESTS="tests/unit/test_precision.py tests/unit/test_fusion.py" # the unit tests that take CINFER_TEST_DEVICE
smoke() { # the first minutes of tests
    stage gpus "$B/bin/cinfer" gpus
    stage cuda_pytest $PY -m pytest -q -rs -p no:cacheprovider tests/cuda
    stage unit_cuda env CINFER_TEST_DEVICE=cuda $PY -m pytest -q -rs -p no:cacheprovider $UNIT_CUDA_TESTS
    # the cinfer tool with a GPU present (its --device cuda test); the example program is not in the bundle, and the
    # machine's onnxruntime (IR 13 at most) cannot read the examples' IR 14 files for the two comparisons with it
    stage cli_pytest $PY -m pytest -q -rs -p no:cacheprovider tests/cli -k "not example_program and not matching_onnxruntime"
}
overlap() { # copy/compute overlap with CUDA event timestamps, beside PyTorch's (models exported as compare does)
    torch_python
    stage overlap timeout 300 $TPY bench/gpu/overlap_timeline.py --work "$WORK/compare-models" --out "$OUT/overlap_json"
}
for what in "${@:-tests}"; do
    case "$what" in
    tests)
        smoke
        stage model_tests_cuda env CINFER_TEST_DEVICE=cuda $PY -m pytest -q -p no:cacheprovider tests/models
        op_tests
        ;;
    smoke) smoke ;;
    verify)
        # a quick check of the rows the latest changes moved (~5 min): the CUDA tests, then BERT-base (fused attention,
        # GELU, float32 LayerNorm), ResNet-50 (channels-last convolutions), the DLRM-style rows (LookupConcat, the SM
        # input copies) and the image rows (caller buffers bound in place); the scale stage with
        # SCALE_ARGS="--gpu-wait block" on nvidia-h200-x2 has still never run
        smoke
        torch_python
        stage compare_verify timeout 540 $TPY bench/gpu/compare_pytorch.py --out "$OUT/compare" --work "$WORK/compare-models" \
            --models bert,resnet50,dlrm,image --precisions fp32,fp16 --no-agreement \
            --batches "bert:1,32,128;resnet50:1,32,256;dlrm:1,128;image:1"
        overlap
        ;;
    overlap) overlap ;;
    ops) op_tests ;;
    models)
        stage models $PY bench/gpu/check_models.py "$WORK/models"
        ;;
    alloc)
        [ -f "$WORK/models/resnet50.onnx" ] || stage models $PY bench/gpu/check_models.py "$WORK/models"
        stage alloc_trace_file $PY bench/gpu/alloc_trace.py "$WORK/models/resnet50.onnx" 32 "$WORK/resnet50.trace"
        stage bench_alloc "$B/bin/bench_alloc" "$WORK/resnet50.trace" 20
        ;;
    server)
        server_env
        stage server_gpu $PY -m pytest -q -rs -p no:cacheprovider tests/server/test_protocol.py \
            tests/server/test_batching.py "tests/server/test_metrics.py::test_real_gpus_match_nvidia_smi" \
            tests/server/test_oom.py tests/server/test_faults.py tests/server/test_precision.py \
            tests/server/test_triton_flags.py tests/server/test_shm.py tests/server/test_batch_isolation.py \
            tests/server/test_reload.py
        ;;
    soak)
        # reloads under load (issue 24): ResNet-50 and BERT-base on one GPU, each reloaded, unloaded and loaded again
        # in turn every SOAK_RELOAD_EVERY s for SOAK_SECONDS (default 480) while clients keep both under load; zero
        # failed requests, descriptors back to the start, GPU allocator bytes back to each model's baseline
        server_env
        export_model resnet50
        export_model bert
        stage gpu_soak $PY bench/soak/soak.py --server "$B/bin/cinfer-server" --reload-every "${SOAK_RELOAD_EVERY:-5}" \
            --duration "${SOAK_SECONDS:-480}" --device cuda --model "resnet50=$WORK/compare-models/resnet50.onnx" \
            --model "bert=$WORK/compare-models/bert.onnx" --json "$OUT/gpu_soak.json" ${SOAK_ARGS:-}
        ;;
    compare)
        torch_python
        stage compare timeout "${COMPARE_TIMEOUT:-560}" $TPY bench/gpu/compare_pytorch.py --out "$OUT/compare" \
            --work "$WORK/compare-models" ${COMPARE_ARGS:-}
        ;;
    profile)
        torch_python
        for spec in ${PROFILE_SPECS:-resnet50:64:fp16 bert:32:fp16}; do
            IFS=: read -r m bsz prec <<<"$spec"
            export_model "$m"
            [ "${PROFILE_TIMING:-1}" = 1 ] && stage "timing_${m}_b${bsz}_$prec" $TPY bench/gpu/check_timing.py "$m" "$bsz" \
                "$prec" "$WORK/compare-models"
            stage "profile_${m}_b${bsz}_$prec" "$B/bin/cinfer" bench "$WORK/compare-models/$m.onnx" --device cuda \
                --batch "$bsz" --precision "$prec" --iters 10 --warmup 2 --profile --int-high 1000
            stage "bench_${m}_b${bsz}_$prec" "$B/bin/cinfer" bench "$WORK/compare-models/$m.onnx" --device cuda \
                --batch "$bsz" --precision "$prec" --iters 20 --warmup 3 --int-high 1000
        done
        ;;
    algos)
        # the convolution algorithm choices at ALGO_SPECS (model:batch:precision; default resnet50:32:fp16
        # resnet50:256:fp16): cinfer bench with cuDNN timing on and off (CINFER_CUDNN_BENCHMARK), channels-last on
        # and off (CINFER_CHANNELS_LAST), each choice logged (CINFER_CUDNN_LOG=1) in its stage's log
        torch_python
        for spec in ${ALGO_SPECS:-resnet50:32:fp16 resnet50:256:fp16}; do
            IFS=: read -r m bsz prec <<<"$spec"
            export_model "$m"
            for timing in 1 0; do
                for last in 1 0; do
                    stage "algos_${m}_b${bsz}_${prec}_timing${timing}_last${last}" env CINFER_CUDNN_LOG=1 \
                        CINFER_CUDNN_BENCHMARK=$timing CINFER_CHANNELS_LAST=$last "$B/bin/cinfer" bench \
                        "$WORK/compare-models/$m.onnx" --device cuda --batch "$bsz" --precision "$prec" --iters 20 \
                        --warmup 3 --int-high 1000
                done
            done
        done
        ;;
    ncu)
        # Nsight Compute on one kernel launch of cinfer bench (NCU_KERNEL: a name regex), per PROFILE_SPECS model
        torch_python
        for spec in ${PROFILE_SPECS:-bert:128:fp16}; do
            IFS=: read -r m bsz prec <<<"$spec"
            export_model "$m"
            rep="$OUT/ncu_${m}_b${bsz}_$prec"
            stage "ncu_${m}_b${bsz}_$prec" ncu --clock-control none --kernel-name "regex:${NCU_KERNEL:-.}" \
                --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy \
                --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats \
                --section InstructionStats --section SourceCounters --import-source yes --print-summary none \
                --export "$rep" --force-overwrite --page details \
                "$B/bin/cinfer" bench "$WORK/compare-models/$m.onnx" --device cuda --batch "$bsz" --precision "$prec" \
                --iters 1 --warmup 0 --int-high 1000
            # per-SASS-instruction samples and counts of the same launch (the report itself comes back too)
            stage "ncu_sass_${m}_b${bsz}_$prec" ncu --import "$rep.ncu-rep" --page source --csv --print-source sass
        done
        ;;
    trace)
        torch_python
        # per-kernel GPU time, cinfer (graphs off) beside PyTorch eager, from torch.profiler's CUPTI trace
        stage kernel_trace $TPY bench/gpu/kernel_trace.py "$WORK/compare-models" \
            ${PROFILE_SPECS:-resnet50:1:fp16 bert:128:fp16 dlrm:128:fp32}
        ;;
    startup)
        # cinfer-server start to ready with ResNet-50 on the GPU, devices started beside the repository load or not
        export_model resnet50
        stage server_start $PY bench/gpu/server_start.py --server "$B/bin/cinfer-server" \
            --onnx "$WORK/compare-models/resnet50.onnx" --repeats "${STARTUP_REPEATS:-3}"
        ;;
    outputs)
        # cinfer-server's engine phase with a GPU lane's outputs page-locked (default) or malloc'd, image model
        server_env
        export_model image
        stage server_outputs $PY bench/gpu/server_outputs.py --server "$B/bin/cinfer-server" \
            --onnx "$WORK/compare-models/image.onnx" --repeats "${OUTPUTS_REPEATS:-2}"
        ;;
    scale)
        torch_python
        # cinfer-server with ResNet-50 under perf_analyzer (system shared memory) on every visible GPU, then on GPU 0
        # only; the engine alone at the formed batch size (bench/gpu/server_scale.py; carry .deps/perf-analyzer.tar.xz)
        tar -C "$WORK" -xJf .deps/perf-analyzer.tar.xz
        PA_LIBS="$WORK/perf_analyzer/nvidia/cuda_runtime/lib:$WORK/perf_analyzer/lib"
        export_model resnet50
        stage server_scale env NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH="$PA_LIBS:$LD_LIBRARY_PATH" $PY bench/gpu/server_scale.py \
            --server "$B/bin/cinfer-server" --cli "$B/bin/cinfer" --perf "$WORK/perf_analyzer/bin/perf_analyzer" \
            --onnx "$WORK/compare-models/resnet50.onnx" --name resnet50 --precision fp16 --out "$OUT/scale" ${SCALE_ARGS:-}
        ;;
    sanitize)
        # the GPU suite under compute-sanitizer memcheck (child processes tracked too): the CUDA pytest suite, the
        # precision/fusion unit tests and the model tests on cuda, then the differential op tests; each stage fails on
        # the first reported error (exit 9). SANITIZE_TIMEOUT bounds each stage (the call itself has 600 s)
        CS="timeout ${SANITIZE_TIMEOUT:-400} compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 --print-limit 20"
        # (not the sticky-error test: it writes out of bounds on purpose, which memcheck reports and turns into a
        # different launch error than the test expects)
        stage cuda_pytest_memcheck $CS $PY -m pytest -q -rs -p no:cacheprovider tests/cuda -k "not sticky_error and not past_its_allocation"
        # (the copy-range test provokes refused copy calls on purpose, which memcheck counts as API errors: it runs with
        # those unreported, its memory accesses still checked)
        stage copy_range_memcheck $CS --report-api-errors no $PY -m pytest -q -rs -p no:cacheprovider tests/cuda -k past_its_allocation
        stage unit_cuda_memcheck env CINFER_TEST_DEVICE=cuda $CS $PY -m pytest -q -rs -p no:cacheprovider $UNIT_CUDA_TESTS
        stage model_tests_cuda_memcheck env CINFER_TEST_DEVICE=cuda $CS $PY -m pytest -q -p no:cacheprovider tests/models
        [ -n "${SANITIZE_OPS:-}" ] && stage diff_ops_memcheck $CS $PY tests/ops/diff_ops.py --list ${FILTER:+--filter "$FILTER"}
        if [ -n "${SANITIZE_SERVER:-}" ]; then # the server GPU suite, each cinfer-server it starts under memcheck
            server_env
            stage server_gpu_memcheck $CS $PY -m pytest -q -rs -p no:cacheprovider \
                tests/server/test_protocol.py tests/server/test_batching.py tests/server/test_faults.py -k "not sticky"
        fi
        ;;
    *) echo "unknown stage $what"; exit 2 ;;
    esac
done
echo "==== summary (logs in \$OUT) ===="
printf '%s\n' "${SUMMARY[@]}"
