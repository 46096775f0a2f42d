#!/usr/bin/env bash
# The tensor-parallel CUDA forward on a 4-GPU machine (ready; not yet run — no 4-GPU machine was available):
#   TP 4 on the small preset with 16 heads (4 heads, 1 output group and 4 whole experts per rank) against TP 1 and the
#   CPU oracle with the exact equalities within TP 4, and the routed-expert split measurement at full V4.1-Flash
#   width on 4 GPUs (96 whole experts or a 576-wide slice of all 384 per rank) at batch 1, 8, 32, 64.
# Exit status: 0 all passed, 77 fewer than 4 GPUs, else failed. Same variables as run_tp.sh.
set -euo pipefail
source "$(dirname "$0")/tp_common.sh" 4
status=0
echo "== TP 4, small preset with 16 heads (the CUDA sparse attention needs 4 per rank)"
DSV4_TP_HEADS=16 "$bin" --world 4 || status=1
echo "== TP 2 on the same machine, small preset"; "$bin" --world 2 || status=1
echo "== routed experts: tp_intermediate vs expert_parallel, 4 GPUs"; "$bin" --world 4 --scenario moe-bench || status=1
exit "$status"
