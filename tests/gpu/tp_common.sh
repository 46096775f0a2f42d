# Sourced by run_tp.sh, run_tp4.sh and run_tp_serve.sh as `source tp_common.sh GPUS [TARGET]`: sets $bin to the
# built TARGET (tp_forward_test by default, or dsv4), building it unless DSV4_TEST_BIN (tp_forward_test) or
# DSV4_BIN (dsv4) names a prebuilt one, and exits 77 when this machine has fewer than GPUS GPUs.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
target="${2:-tp_forward_test}"
if [ "$target" = dsv4 ]; then bin="${DSV4_BIN:-}"; out=dsv4; else bin="${DSV4_TEST_BIN:-}"; out="tests/gpu/$target"; fi
if [ -z "$bin" ]; then
  build="${DSV4_BUILD_DIR:-$root/build-gpu}"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="${DSV4_CUDA_ARCH:-native}" -DDSV4_BENCH=OFF
  cmake --build "$build" --target "$target" -j"${DSV4_JOBS:-$(nproc)}"
  bin="$build/$out"
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$gpus" -lt "$1" ]; then echo "SKIPPED: $gpus GPUs; this script needs $1"; exit 77; fi
