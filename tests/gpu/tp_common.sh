# Sourced by run_tp.sh and run_tp4.sh: sets $bin to tp_forward_test (building it unless DSV4_TEST_BIN
# names a prebuilt one) and exits 77 when this machine has fewer than $1 GPUs.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${DSV4_TEST_BIN:-}"
if [ -z "$bin" ]; then
  build="${DSV4_BUILD_DIR:-$root/build-gpu}"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="${DSV4_CUDA_ARCH:-native}" -DDSV4_BENCH=OFF
  cmake --build "$build" --target tp_forward_test -j"${DSV4_JOBS:-$(nproc)}"
  bin="$build/tests/gpu/tp_forward_test"
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$gpus" -lt "$1" ]; then echo "SKIPPED: $gpus GPUs; this script needs $1"; exit 77; fi
