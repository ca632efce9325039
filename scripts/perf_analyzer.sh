#!/usr/bin/env bash
# Installs and runs Triton's perf_analyzer for the server benchmark and its CI sweep.
#
# The PyPI package `perf-analyzer` is an empty placeholder. The binary that runs on Debian 12 is the one inside the
# tritonclient 2.41.0 manylinux wheel (bin/perf_analyzer); it links libb64.so.0d (Debian: libb64-0d) and
# libcudart.so.12 (even for CPU-only runs), which comes from the PyPI package nvidia-cuda-runtime-cu12. Both wheels
# go into .deps/perf_analyzer/ (pip --target, no dependencies), apart from the project's .venv, whose tritonclient
# (2.73, for the Python tests) must not be downgraded.
#
# Usage: scripts/perf_analyzer.sh --install   install (idempotent; apt-get installs libb64-0d when missing)
#        scripts/perf_analyzer.sh --check     exit 0 when installed and runnable, 1 otherwise (prints why)
#        scripts/perf_analyzer.sh ARGS...     run perf_analyzer with ARGS (must be installed)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/.deps/perf_analyzer"
PINS=(tritonclient==2.41.0 nvidia-cuda-runtime-cu12==12.9.79)
BIN="$DEST/bin/perf_analyzer"
export LD_LIBRARY_PATH="$DEST/nvidia/cuda_runtime/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

runnable() {
    [ -x "$BIN" ] && cmp -s <(printf '%s\n' "${PINS[@]}") "$DEST/.pins" && "$BIN" --version >/dev/null 2>&1
}

case "${1:-}" in
--install)
    if ! dpkg-query -W -f='${Status}' libb64-0d 2>/dev/null | grep -q "install ok installed"; then
        echo "perf_analyzer: installing apt package libb64-0d"
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libb64-0d
    fi
    if runnable; then exit 0; fi
    echo "perf_analyzer: installing ${PINS[*]} into ${DEST#"$ROOT"/}"
    PY="$ROOT/.venv/bin/python"; [ -x "$PY" ] || PY=python3
    rm -rf "$DEST"
    "$PY" -m pip install -q --no-deps --only-binary=:all: --target "$DEST" "${PINS[@]}"
    printf '%s\n' "${PINS[@]}" > "$DEST/.pins"
    if ! "$BIN" --version >/dev/null 2>&1; then
        echo "perf_analyzer: installed but does not run:" >&2
        ldd "$BIN" | grep "not found" >&2 || "$BIN" --version >&2 || true
        exit 1
    fi
    ;;
--check)
    if runnable; then exit 0; fi
    echo "perf_analyzer is not installed in ${DEST#"$ROOT"/} (run scripts/perf_analyzer.sh --install)"
    exit 1
    ;;
*)
    if [ ! -x "$BIN" ]; then
        echo "perf_analyzer is not installed in ${DEST#"$ROOT"/} (run scripts/perf_analyzer.sh --install)" >&2
        exit 127
    fi
    exec "$BIN" "$@"
    ;;
esac
