#!/usr/bin/env bash
# The CUDA forward against the CPU oracle on the tiny and small presets of both variants (V4.1 and
# V4 / 0731), on any machine with an NVIDIA GPU: builds tests/gpu/forward_cuda_test and runs it
# once per preset and variant. Prints the per-layer
# NRMS table, logits NRMS(CUDA, ref64) against the floor F = NRMS(ref32, ref64) (gate 1.05 F), top-1
# agreement, and checks the exact equalities (pieces == whole, verify == single steps, batched ==
# alone, rollback and snapshot == continuing). Then EXL3 on each preset (tests/gpu/exl3_forward_cuda_test:
# the whole-model gate on the EXL3 gate weights, and on a written synthetic pack the EXL3 pieces, the
# exact equalities and the one-prompt ratio as information). Exit status: 0 all passed, 77 no GPU,
# else failed.
#   DSV4_BUILD_DIR  build directory (default: build-gpu beside the sources)
#   DSV4_CUDA_ARCH  CMAKE_CUDA_ARCHITECTURES (default: native, the GPU of this machine)
#   DSV4_TEST_BIN   run this prebuilt test binary instead of building
#   DSV4_EXL3_TEST_BIN  the same for the EXL3 pack test
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${DSV4_TEST_BIN:-}"
exl3_bin="${DSV4_EXL3_TEST_BIN:-}"
if [ -z "$bin" ] || [ -z "$exl3_bin" ]; then
  build="${DSV4_BUILD_DIR:-$root/build-gpu}"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="${DSV4_CUDA_ARCH:-native}" -DDSV4_BENCH=OFF
  cmake --build "$build" --target forward_cuda_test exl3_forward_cuda_test -j"${DSV4_JOBS:-$(nproc)}"
  bin="${bin:-$build/tests/gpu/forward_cuda_test}"
  exl3_bin="${exl3_bin:-$build/tests/gpu/exl3_forward_cuda_test}"
fi
status=0
for variant in v41 v4-0731; do
  for preset in tiny small; do
    echo "== preset $preset, variant $variant"
    DSV4_GPU_PRESET=$preset DSV4_GPU_VARIANT=$variant "$bin" || status=$?
    [ "$status" = 77 ] && exit 77
  done
done
for preset in tiny small; do  # EXL3 packs exist for V4.1 only
  echo "== preset $preset, EXL3 (gate weights and a synthetic pack)"
  DSV4_GPU_PRESET=$preset "$exl3_bin" || status=$?
  [ "$status" = 77 ] && exit 77
done
exit "$status"
