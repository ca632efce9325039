#!/usr/bin/env bash
# Builds cinfer with the CUDA module here (no GPU needed) and packs what the lent GPU machine lacks into
# .deps/gpu-bundle.tar.xz: the binaries, the Debian libraries they link (resolved with ldd) and the pytest wheels.
# Then: device tool, carry [".deps/gpu-bundle.tar.xz"] (plus ".deps/perf-analyzer.tar.xz" for the scale stage),
# command "bash bench/gpu/run.sh tests" (see bench/gpu/run.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD=${BUILD:-build-gpu}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCINFER_CUDA=ON -DCINFER_SERVER=ON \
      -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target cinfer cinfer_cuda cinfer_shared bench_alloc cinfer-server fake_nvml
STAGE=$(mktemp -d)
mkdir -p "$STAGE/bundle/bin" "$STAGE/bundle/lib" "$STAGE/bundle/wheels"
cp -a "$BUILD"/libcinfer.so* "$BUILD"/libcinfer_cuda.so "$BUILD"/cinfer "$BUILD"/bench_alloc "$BUILD"/cinfer-server "$STAGE/bundle/bin/"
mkdir -p "$STAGE/bundle/fake_nvml" && cp -L "$BUILD"/fake_nvml/libnvidia-ml.so* "$STAGE/bundle/fake_nvml/"
# Debian libraries the binaries need, minus what every Linux and the CUDA machine have (libc, CUDA's own).
for f in "$BUILD/libcinfer.so" "$BUILD/libcinfer_cuda.so" "$BUILD/cinfer" "$BUILD/cinfer-server"; do
    ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' \
     | grep -vE 'libcudart|libcublas|libcudnn|libcinfer' \
     | grep -vE '/lib(z|gnutls|nettle|hogweed|gmp|p11-kit|idn2|unistring|tasn1|ffi|brotli[a-z]*)\.so' | while read -r lib; do
    cp -L "$lib" "$STAGE/bundle/lib/"
done
.venv/bin/pip download -q --no-deps -d "$STAGE/bundle/wheels" pytest==8.4.2 pluggy==1.6.0 iniconfig==2.1.0 >/dev/null
# the server tests' client side for the GPU machine's Python 3.12 (it has numpy, onnx, onnxruntime, aiohttp)
mkdir -p "$STAGE/bundle/wheels312"
.venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$STAGE/bundle/wheels312" \
    tritonclient==2.73.0 gevent==26.9.0 geventhttpclient==2.6.1 greenlet==3.3.2 zope.event==6.2 zope.interface==8.7 \
    python-rapidjson==1.25 brotli==1.2.1 certifi urllib3 prometheus-client==0.26.0 >/dev/null
mkdir -p .deps
tar -C "$STAGE" -cJf .deps/gpu-bundle.tar.xz bundle
# perf_analyzer for run.sh's scale stage (a second carry path): scripts/perf_analyzer.sh's install plus libb64
if [ -x .deps/perf_analyzer/bin/perf_analyzer ]; then
    PA=$(mktemp -d)
    cp -a .deps/perf_analyzer "$PA/perf_analyzer"
    rm -rf "$PA"/perf_analyzer/{tritonclient,tritongrpcclient,tritonhttpclient,tritonclientutils,tritonshmutils}
    mkdir -p "$PA/perf_analyzer/lib"
    ldd .deps/perf_analyzer/bin/perf_analyzer | awk '/libb64/ {print $3}' | xargs -r -I{} cp -L {} "$PA/perf_analyzer/lib/"
    tar -C "$PA" -cJf .deps/perf-analyzer.tar.xz perf_analyzer
    rm -rf "$PA"
    ls -l .deps/perf-analyzer.tar.xz
fi
rm -rf "$STAGE"
ls -l .deps/gpu-bundle.tar.xz
tar -tJf .deps/gpu-bundle.tar.xz | sed 's/^/  /'
