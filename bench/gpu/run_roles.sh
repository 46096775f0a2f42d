#!/usr/bin/env bash
# Prefill by layer role on one GPU from a prebuilt build (docs/bench.md): `dsv4 bench --roles` for V4.1 and for
# V4-Flash-0731 at 2K and 8K-row chunks after 0, 32K and 128K cached rows, each with its projected time to first
# token, plus the same run's decode steps at batch 1 and 32. Writes one log per variant.
#   bench/gpu/run_roles.sh OUT_DIR
#   DSV4_BUILD_DIR  the build directory holding dsv4 (Release, CUDA) (default: build)
#   DSV4_ROLES_ITERS timed chunks per measurement (default 4)
#   DSV4_ROLES_ARGS extra arguments for both runs (e.g. "--seed 2")
# Exit status: 0 both ran, 77 no GPU, 1 otherwise.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${DSV4_BUILD_DIR:-$root/build}"
out="${1:?usage: bench/gpu/run_roles.sh OUT_DIR}"
mkdir -p "$out"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  | tee "$out/gpu.txt" || { echo "no GPU"; exit 77; }
status=0
for variant in v41 v4-0731; do
  echo "== dsv4 bench --variant $variant --roles"
  # shellcheck disable=SC2086
  "$build/dsv4" bench --variant "$variant" --roles --batch 1,32 --context 4096 --prefill 2048,8192 \
    --prefill-context 0,32768,131072 --iters "${DSV4_ROLES_ITERS:-4}" ${DSV4_ROLES_ARGS:-} > "$out/roles_$variant.txt" 2>&1 || status=1
  grep -A40 "projected time to first token" "$out/roles_$variant.txt" | head -40
done
exit $status
