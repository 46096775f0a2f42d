#!/usr/bin/env bash
# The vision tower cross-check (tests/reference/vision/README.md): for the tiny and small presets, synthesizes a
# checkpoint with dsv4, runs DeepSeek's reference vision.py (torch, on the CPU; on CUDA too when present), a numpy
# second implementation and the CPU oracle (ref32, ref64) on the same patches, prints per-layer NRMS and keeps
# the reference outputs of a few images as golden files.
#
#   tests/reference/vision/run_device.sh [WORK_DIR]      (default WORK_DIR: $TMPDIR/dsv4_vision_check)
#   DSV4_BUILD_DIR  build directory holding `dsv4` and `tests/vision_dump`; built there (CPU only, the targets
#                   dsv4 and vision_dump) when either is missing (default: build-vision beside the sources)
#
# Needs python3 with numpy and torch (>= 2.5 for the reference's fp32 SDPA math path; older versions compute it
# in bf16), and the reference files in tests/reference/upstream/deepseek_v41/ (README.md says how to obtain
# them). Exit status 0 when every comparison passed.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
build="${DSV4_BUILD_DIR:-$root/build-vision}"
work="${1:-${TMPDIR:-/tmp}/dsv4_vision_check}"
if [ ! -x "$build/dsv4" ] || [ ! -x "$build/tests/vision_dump" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_CUDA=OFF -DDSV4_BENCH=OFF || exit 1
  cmake --build "$build" --target dsv4 vision_dump -j"${DSV4_JOBS:-$(nproc)}" || exit 1
fi
[ -f "$here/../upstream/deepseek_v41/vision.py" ] ||
  { echo "tests/reference/upstream/deepseek_v41/vision.py missing (tests/reference/vision/README.md)"; exit 1; }
seed=1
date -u; nproc; nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true
git -C "$here" rev-parse HEAD 2>/dev/null || true
python3 -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())" || exit 1
cuda=$(python3 -c "import torch; print(int(torch.cuda.is_available()))")
status=0
for preset in tiny small; do
  w="$work/$preset"
  rm -rf "$w"; mkdir -p "$w"
  echo "=== $preset ==="
  "$build/dsv4" synth --preset "$preset" --seed "$seed" --out "$w/ckpt" --no-sync >"$w/synth.log" 2>&1 ||
    { cat "$w/synth.log"; status=1; continue; }
  python3 "$here/vision_ref.py" patches "$w/ckpt" "$w/patches" || { status=1; continue; }
  time "$build/tests/vision_dump" --model "$w/ckpt" --images "$w/patches/images.json" --out "$w/dsv4" || { status=1; continue; }
  time python3 "$here/vision_ref.py" reference "$w/ckpt" "$w/patches" "$w/ref_cpu" --device cpu || { status=1; continue; }
  echo "--- $preset: dsv4 against the reference on the CPU ---"
  python3 "$here/vision_ref.py" compare "$w/patches" "$w/ref_cpu" "$w/dsv4" || status=1
  if [ "$cuda" = 1 ]; then
    python3 "$here/vision_ref.py" reference "$w/ckpt" "$w/patches" "$w/ref_cuda" --device cuda || status=1
    echo "--- $preset: dsv4 against the reference on CUDA ---"
    python3 "$here/vision_ref.py" compare "$w/patches" "$w/ref_cuda" "$w/dsv4" || status=1
  fi
  python3 "$here/vision_numpy.py" "$w/ckpt" "$w/patches" "$w/numpy" >/dev/null || status=1
  echo "--- $preset: dsv4 against the numpy second implementation ---"
  python3 "$here/vision_ref.py" compare "$w/patches" "$w/numpy" "$w/dsv4" || status=1
  python3 "$here/vision_ref.py" golden "$w/patches" "$w/ref_cpu" "$work/golden/$preset" \
    --preset "$preset" --seed "$seed" || status=1
done
echo "golden files: $work/golden (copy its tiny/ and small/ to tests/data/vision_reference/, read by cpu_test VisionReference.*)"
du -sh "$work/golden" 2>/dev/null || true
exit $status
