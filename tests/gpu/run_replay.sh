#!/usr/bin/env bash
# Bounded decoder replay on a GPU machine from a prebuilt build directory (builds nothing; docs/replay.md):
# tests/gpu/replay_cuda_test (replayed == full prefill bit for bit, rows per layer == the oracle's) and
# forward_cuda_test (the whole-model gate, whose four logits digests must stay those recorded in
# docs/perf.md, and the exact equalities, whose prompt pieces without logits now run bounded) on the tiny and
# small presets of V4.1 and V4-Flash-0731; the attention kernel tests (top-k with a candidate row map), the
# memory plan against the CUDA sizing, the graph cache, layer probe, threaded tensor-parallel and EXL3 forward
# tests; then `dsv4 bench` without and with bounded replay on a cut with a decoder. Exit status: 0 all passed, 77 no GPU, else failed.
#   DSV4_BUILD_DIR  the build directory (required): tests/gpu/*_test and dsv4 built there (Release, sm_90a)
#   DSV4_BENCH_ARGS the bench's arguments (default below); DSV4_SKIP_BENCH=1 skips it
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${DSV4_BUILD_DIR:?set DSV4_BUILD_DIR to the build directory}"
gpu="$build/tests/gpu"
cd "$root"
status=0
run() {  # a test binary and its arguments; 77 (no GPU) ends the script
  echo "== $*"
  "$@"
  local s=$?
  [ "$s" = 77 ] && exit 77
  [ "$s" != 0 ] && status=1
  return 0
}
digests=""
for variant in v41 v4-0731; do
  for preset in tiny small; do
    run env DSV4_GPU_PRESET=$preset DSV4_GPU_VARIANT=$variant "$gpu/replay_cuda_test"
    echo "== $gpu/forward_cuda_test ($preset $variant)"
    log="$(mktemp)"
    env DSV4_GPU_PRESET=$preset DSV4_GPU_VARIANT=$variant "$gpu/forward_cuda_test" > "$log" 2>&1
    s=$?
    cat "$log"
    [ "$s" = 77 ] && exit 77
    [ "$s" != 0 ] && status=1
    d="$(sed -n 's/.*backend logits digest[^:]*: \([0-9a-f]*\).*/\1/p' "$log" | head -1)"
    echo "gate digest, $preset $variant: ${d:-none}"
    digests="$digests ${d:-none}"
    rm -f "$log"
  done
done
# The gate digests recorded in docs/numerics.md (2026-12-07, FP8 / FP4 linears on the f16 MMA pair), in the order
# tiny V4.1, small V4.1, tiny 0731, small 0731. With the tensor-core sparse attention (the default, both variants):
# 80e0e929533e6190, 2992074627188e6d, a76fd72ac39fbd1d, ad621e94839af20d; with the CUDA-core kernels
# (DSV4_ATTN_TC=0), whose sums follow the oracle's order: 3bc8a671138f4add, e89ccda2b6344847, 69a2a1b7e91c4f93,
# 34af239e15bf2922.
if [ "${DSV4_ATTN_TC:-1}" != 0 ]; then
  want="80e0e929533e6190 2992074627188e6d a76fd72ac39fbd1d ad621e94839af20d"
else
  want="3bc8a671138f4add e89ccda2b6344847 69a2a1b7e91c4f93 34af239e15bf2922"
fi
i=0
for d in $digests; do
  i=$((i + 1))
  w="$(echo $want | cut -d' ' -f$i)"
  [ "$d" = "$w" ] || { echo "gate digest $d (run $i) is not the recorded $w (docs/perf.md)"; status=1; }
done
for t in attention_cuda_test memory_plan_cuda_test graph_cache_test layer_probe_test tp_threads_test; do
  run "$gpu/$t"
done
for preset in tiny small; do  # EXL3 packs (V4.1): their grouped wo_a on bounded rows too
  run env DSV4_GPU_PRESET=$preset "$gpu/exl3_forward_cuda_test"
done
if [ "${DSV4_SKIP_BENCH:-0}" != 1 ]; then
  # 2 encoder layers then 5 of the decoder (layers 20-24 renumbered 2-6, about 51 GB of weights): the prefill
  # table times each chunk without and with bounded replay and projects the 40-layer model.
  args="${DSV4_BENCH_ARGS:---layers 2 --decoder-layers 5 --batch 1 --context 4096 --prefill 2048,4096 --iters 3}"
  echo "== dsv4 bench $args"
  # shellcheck disable=SC2086
  "$build/dsv4" bench $args || status=1
fi
exit "$status"
