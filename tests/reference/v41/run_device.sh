#!/usr/bin/env bash
# Row-by-row comparison of dsv4 with DeepSeek's V4.1 reference on shallow synthetic configurations where the
# indexer's top-k and the candidate pool bind. Needs python3 with torch >= 2.8 (float4 / e8m0 dtypes), numpy and
# sympy; the reference files in tests/reference/upstream/deepseek_v41/ (README.md); DSV4 = a dsv4 binary.
# usage: DSV4=/path/to/dsv4 run_device.sh OUT_DIR [CONFIG...]
# STRADDLE=1: also the values before rounding on both sides (dsv4 --dump-pre-round, reference_run.py --pre-round)
# and, per configuration, straddle.py's table of the rows that part by themselves, appended to OUT_DIR/straddle.md
# (the .npz of values before rounding are removed afterwards unless KEEP_PRE_ROUND=1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; shift || true
dsv4="${DSV4:-dsv4}"
mkdir -p "$out"
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(swa_r2_top4 cand2_top8 cand3_top6 tiny swa_r2_top4_gate cand2_top8_gate cand3_top6_gate tiny_gate)

# name -> synth flags and config.json edits (text_config keys)
# a name ending in _gate uses the whole-model gate's weights (docs/numerics.md: small sub-layer outputs, so one
# rounding flip stays small instead of spreading through every later row)
synth_flags() {
  case "$1" in *_gate) echo -n "--profile gate " ;; *) echo -n "--seed 1 " ;; esac
  case "${1%_gate}" in
    swa_r2_top4) echo "--layers 4" ;;
    cand2_top8|cand3_top6|tiny) echo "" ;;
  esac
}
edits() {
  case "${1%_gate}" in
    swa_r2_top4) echo '{"index_topk": 4}' ;;
    cand2_top8) echo '{"index_topk": 8, "candidate_topk_blocks": 2, "candidate_block_size": 4}' ;;
    cand3_top6) echo '{"index_topk": 6, "candidate_topk_blocks": 3, "candidate_block_size": 4}' ;;
    tiny) echo '{}' ;;
  esac
}
T=${ROWS:-96}
straddle="${STRADDLE:-0}"
if [ "$straddle" = 1 ]; then
  python3 "$here/straddle.py" --self-check > /dev/null
  python3 "$here/straddle.py" --header-only > "$out/straddle.md"
fi
ids=$(python3 -c "print(','.join(str((7919*i+13) % 129000) for i in range($T)))")
for c in "${configs[@]}"; do
  d="$out/$c"; ck="$d/ckpt"; mkdir -p "$d"
  "$dsv4" synth --preset tiny $(synth_flags "$c") --out "$ck" --no-sync > "$d/synth.log" 2>&1 || { cat "$d/synth.log"; exit 1; }
  python3 - "$ck/config.json" "$(edits "$c")" <<'PY'
import json, sys
p, e = sys.argv[1], json.loads(sys.argv[2])
cfg = json.load(open(p)); cfg["text_config"].update(e); json.dump(cfg, open(p, "w"), indent=2)
PY
  pre32=() pre64=() pre_ref=()
  if [ "$straddle" = 1 ]; then
    pre32=(--dump-pre-round "$d/p32.npz") pre64=(--dump-pre-round "$d/p64.npz") pre_ref=(--pre-round "$d/pre.npz")
    cp "$ck/config.json" "$d/config.json"
  fi
  "$dsv4" run --model "$ck" --ids "$ids" --max-tokens 0 --dump-logits "$d/d32.npy" --dump-hidden "$d/h32.npz" ${pre32[@]+"${pre32[@]}"} > "$d/run32.log" 2>&1 || { cat "$d/run32.log"; exit 1; }
  "$dsv4" run --model "$ck" --ids "$ids" --max-tokens 0 --ref64 --dump-logits "$d/d64.npy" --dump-hidden "$d/h64.npz" ${pre64[@]+"${pre64[@]}"} > "$d/run64.log" 2>&1 || { cat "$d/run64.log"; exit 1; }
  python3 "$here/reference_run.py" "$ck" "$ids" "$d/ref.npz" ${pre_ref[@]+"${pre_ref[@]}"} > "$d/ref.log" 2>&1 || { cat "$d/ref.log"; exit 1; }
  echo "== $c ($(edits "$c"))"
  python3 "$here/compare.py" "$d/ref.npz" "$d/d32.npy" "$d/h32.npz" "$d/d64.npy" "$d/h64.npz" "$d/compare.json"
  if [ "$straddle" = 1 ]; then
    grep -i "warning" "$d/ref.log" || true
    python3 "$here/straddle.py" --name "$c" --dsv4 "$d/p32.npz" --ref64 "$d/p64.npz" --reference "$d/pre.npz" \
      --config "$d/config.json" | tee -a "$out/straddle.md"
    [ "${KEEP_PRE_ROUND:-0}" = 1 ] || rm -f "$d/p32.npz" "$d/p64.npz" "$d/pre.npz"
  fi
  rm -rf "$ck"
done
