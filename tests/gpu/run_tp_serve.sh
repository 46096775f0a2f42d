#!/usr/bin/env bash
# `dsv4 serve --tp 2 --backend cuda` on a 2-GPU machine against `--tp 1` (tests/gpu/tp_serve_check.py): same
# replies at temperature 0 and with a seed (drafted and plain, streaming and not, concurrent), a refusal on one
# rank ending only its request, a killed rank ending every rank with code 70, clean stops after the same plan.
# Writes a synthetic checkpoint first (dsv4 synth, preset $DSV4_TP_SERVE_PRESET, default small: its 8 heads leave 4
# per rank, as the CUDA sparse attention needs).
# Exit status: 0 all passed, 77 fewer than 2 GPUs, else failed.
#   DSV4_BIN        a prebuilt dsv4 (default: built by tp_common.sh; DSV4_BUILD_DIR, DSV4_CUDA_ARCH as run_tp.sh)
#   DSV4_TP_WORK    scratch directory for the model and the logs (default: a fresh mktemp -d)
#   DSV4_TP_SERVE_PHASE  all (default), same (TP 2 == TP 1 and clean stops) or faults (refusal, killed rank)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/tp_common.sh" 2 dsv4
dsv4="$bin"
work="${DSV4_TP_WORK:-$(mktemp -d)}"
mkdir -p "$work/logs"
t0=$(date +%s%N)
"$dsv4" synth --preset "${DSV4_TP_SERVE_PRESET:-small}" --seed 1 --out "$work/model" --no-sync >"$work/logs/synth.log" 2>&1 ||
  { cat "$work/logs/synth.log"; exit 1; }
echo "synthetic ${DSV4_TP_SERVE_PRESET:-small} checkpoint written in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
status=0
python3 "$here/tp_serve_check.py" "$dsv4" "$work/model" "$work/logs" "${DSV4_TP_SERVE_PHASE:-all}" || status=1
exit "$status"
