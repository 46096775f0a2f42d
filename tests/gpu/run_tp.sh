#!/usr/bin/env bash
# The tensor-parallel CUDA forward on a 2-GPU machine: builds tests/gpu/tp_forward_test (CUDA + NCCL) and runs
#   1. TP 1 through the collectives (one rank) == the plain forward, bit for bit;
#   2. TP 2 on the small and tiny presets (with the DSpark drafter): TP 2 logits == TP 1 bit for bit, NRMS(TP 2,
#      ref64) and top-1 against the CPU oracle, and bit for bit within TP 2: pieces == whole, verify == steps,
#      batched == alone, rollback, CUDA graphs == eager, drafted == plain greedy decoding, every rank the same
#      logits; the first draft and the drafted decoding == TP 1's;
#   3. the routed-expert split measurement at full V4.1-Flash width: tp_intermediate vs expert_parallel at
#      batch 1, 8, 32, 64 (docs/fabric.md "Choosing the expert split").
# Exit status: 0 all passed, 77 fewer than 2 GPUs, else failed.
#   DSV4_BUILD_DIR  build directory (default: build-gpu beside the sources)
#   DSV4_CUDA_ARCH  CMAKE_CUDA_ARCHITECTURES (default: native)
#   DSV4_TEST_BIN   run this prebuilt tp_forward_test instead of building
set -euo pipefail
source "$(dirname "$0")/tp_common.sh" 2
status=0
echo "== TP 1 through the collectives (small)"; "$bin" --world 1 || status=1
echo "== TP 2, small preset"; "$bin" --world 2 || status=1
echo "== TP 2, tiny preset with 8 heads (the CUDA sparse attention needs 4 per rank)"
DSV4_TP_PRESET=tiny DSV4_TP_HEADS=8 "$bin" --world 2 || status=1
echo "== routed experts: tp_intermediate vs expert_parallel, 2 GPUs"; "$bin" --world 2 --scenario moe-bench || status=1
exit "$status"
