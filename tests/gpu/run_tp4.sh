#!/usr/bin/env bash
# The tensor-parallel CUDA forward on a 4-GPU machine (ready; not yet run — no 4-GPU machine was available):
#   TP 4 on the small preset (2 heads, 1 output group and a 64-wide expert slice per rank) against TP 1 and the
#   CPU oracle with the exact equalities within TP 4, and the routed-expert split measurement at full V4.1-Flash
#   width on 4 GPUs (96 whole experts or a 576-wide slice of all 384 per rank) at batch 1, 8, 32, 64.
# Exit status: 0 all passed, 77 fewer than 4 GPUs, else failed. Same variables as run_tp.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${DSV4_TEST_BIN:-}"
if [ -z "$bin" ]; then
  build="${DSV4_BUILD_DIR:-$root/build-gpu}"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="${DSV4_CUDA_ARCH:-native}" -DDSV4_BENCH=OFF
  cmake --build "$build" --target tp_forward_test -j"${DSV4_JOBS:-$(nproc)}"
  bin="$build/tests/gpu/tp_forward_test"
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)
if [ "$gpus" -lt 4 ]; then echo "SKIPPED: $gpus GPUs; this script needs 4"; exit 77; fi
status=0
echo "== TP 4, small preset"; "$bin" --world 4 || status=1
echo "== TP 2 on the same machine, small preset"; "$bin" --world 2 || status=1
echo "== routed experts: tp_intermediate vs expert_parallel, 4 GPUs"; "$bin" --world 4 --scenario moe-bench || status=1
exit "$status"
