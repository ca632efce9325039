#!/usr/bin/env bash
# Builds cinfer with the CUDA module here (no GPU needed) and packs what the lent GPU machine lacks into
# .deps/gpu-bundle.tar.xz: the binaries, the Debian libraries they link (resolved with ldd) and the pytest wheels.
# Then: device tool, carry [".deps"], command "bash bench/gpu/run.sh tests" (see bench/gpu/run.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD=${BUILD:-build-gpu}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCINFER_CUDA=ON -DCINFER_SERVER=OFF \
      -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target cinfer cinfer_cuda cinfer_shared bench_alloc
STAGE=$(mktemp -d)
mkdir -p "$STAGE/bundle/bin" "$STAGE/bundle/lib" "$STAGE/bundle/wheels"
cp -a "$BUILD"/libcinfer.so* "$BUILD"/libcinfer_cuda.so "$BUILD"/cinfer "$BUILD"/bench_alloc "$STAGE/bundle/bin/"
# Debian libraries the binaries need, minus what every Linux and the CUDA machine have (libc, CUDA's own).
for f in "$BUILD/libcinfer.so" "$BUILD/libcinfer_cuda.so" "$BUILD/cinfer"; do
    ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' \
     | grep -vE 'libcudart|libcublas|libcudnn|libcinfer' | while read -r lib; do
    cp -L "$lib" "$STAGE/bundle/lib/"
done
.venv/bin/pip download -q --no-deps -d "$STAGE/bundle/wheels" pytest==8.4.2 pluggy==1.6.0 iniconfig==2.1.0 >/dev/null
mkdir -p .deps
tar -C "$STAGE" -cJf .deps/gpu-bundle.tar.xz bundle
rm -rf "$STAGE"
ls -l .deps/gpu-bundle.tar.xz
tar -tJf .deps/gpu-bundle.tar.xz | sed 's/^/  /'
