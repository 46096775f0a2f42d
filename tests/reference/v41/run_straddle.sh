#!/usr/bin/env bash
# The rows where dsv4 and DeepSeek's V4.1 reference first part, each with the first rounding whose results differ
# and whether the two values before it straddle the bf16 boundary (straddle.py), on the five configurations of
# docs/numerics.md ("dsv4 against DeepSeek's reference, row by row"). Needs what run_device.sh needs.
# usage: DSV4=/path/to/dsv4 [REF_THREADS=16] run_straddle.sh OUT_DIR  -> OUT_DIR/straddle.md (printed at the end)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
STRADDLE=1 "$here/run_device.sh" "$out" swa_r2_top4 swa_r2_top4_gate cand2_top8_gate cand3_top6_gate tiny_gate
echo
echo "== $out/straddle.md"
cat "$out/straddle.md"
