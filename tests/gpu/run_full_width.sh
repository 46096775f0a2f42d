#!/usr/bin/env bash
# A full-width release checkpoint on one GPU: `dsv4 synth --preset full --layers N --sparse engram` (random
# values, N backbone layers at the release's width with the head and the DSpark stages; the Engram tables
# holes), the disk's sequential read rate, the CUDA load (rate, peak host memory) and the CUDA logits of a
# short prompt against the CPU oracle's (ref32, ref64) on the same files: the whole-model gate's measures
# (docs/numerics.md) and, from --dump-hidden, every layer's streams.
#
#   tests/gpu/run_full_width.sh [synth] [disk] [load] [oracle] [compare]   (default: all five in order)
#
#   DSV4          the dsv4 binary (default: build/dsv4 beside the sources)
#   DSV4_DIR      checkpoint directory (default: /tmp/dsv4-full-width); needs about 9.5 GB per layer + 30 GB
#   DSV4_LAYERS   backbone layers (default 6)
#   DSV4_VARIANT  v41 (default) or v4-0731
#   DSV4_PRESET   full (default); tiny or small try the script in seconds
#   DSV4_RESULTS  where logs, logits (.npy) and streams (.npz) go (default: DSV4_DIR-results)
#   DSV4_PROMPT   the prompt text
# The comparison needs python3 with numpy. Exit status: 0 when every step ran (the gate's verdict is printed,
# not enforced: random weights are chaotic, docs/numerics.md), else the failing step's.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dsv4="${DSV4:-$root/build/dsv4}"
dir="${DSV4_DIR:-/tmp/dsv4-full-width}"
layers="${DSV4_LAYERS:-6}"
variant="${DSV4_VARIANT:-v41}"
preset="${DSV4_PRESET:-full}"
res="${DSV4_RESULTS:-$dir-results}"
prompt="${DSV4_PROMPT:-The quick brown fox jumps over the lazy dog. In 1905, Albert Einstein published}"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(synth disk load oracle compare)
mkdir -p "$res"

# Runs "$@" and prints its peak RssAnon and RssFile (sampled every 0.1 s from /proc) and wall time.
with_peak_rss() {
  local t0 pid anon=0 file=0 a f rc
  t0=$(date +%s.%N)
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    read -r a f < <(awk '/^RssAnon/{a=$2} /^RssFile/{f=$2} END{print a+0, f+0}' "/proc/$pid/status" 2>/dev/null ||
                    echo "0 0")
    [ "${a:-0}" -gt "$anon" ] && anon=$a
    [ "${f:-0}" -gt "$file" ] && file=$f
    sleep 0.1
  done
  rc=0
  wait "$pid" || rc=$?
  awk -v a="$anon" -v f="$file" -v t0="$t0" -v t1="$(date +%s.%N)" -v rc="$rc" \
    'BEGIN { printf "peak RssAnon %.1f MiB, peak RssFile %.1f MiB, wall %.1f s, exit %d\n", a / 1024, f / 1024, t1 - t0, rc }'
  return "$rc"
}

# Asks the kernel to drop the checkpoint's pages from the page cache (the whole cache when allowed).
drop_cache() {
  sync
  echo 1 > /proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped" && return 0
  for f in "$dir"/*.safetensors; do dd if="$f" iflag=nocache count=0 status=none; done
  echo "page cache of the shards released (fadvise DONTNEED)"
}

for step in "${steps[@]}"; do
  echo "== $step ($(date -u +%T))"
  case "$step" in
    synth)
      df -h "$(dirname "$dir")"
      with_peak_rss "$dsv4" synth --preset "$preset" --variant "$variant" --layers "$layers" --sparse engram --out "$dir" --no-sync \
        2>&1 | tr '\r' '\n' | grep --line-buffered -v '^synth: ' || true
      sync
      du -sh --apparent-size "$dir"; du -sh "$dir"
      ;;
    disk)
      # The largest shard without holes, read with O_DIRECT (no page cache): the disk's sequential rate.
      big=$(for f in "$dir"/*.safetensors; do
              s=$(stat -c '%s %b %B' "$f"); set -- $s
              if [ $(( $2 * $3 )) -ge $(( $1 - (1 << 20) )) ]; then echo "$1 $f"; fi
            done | sort -n | tail -1 | cut -d' ' -f2)
      echo "reading $big (its first 4 GiB at most) with O_DIRECT"
      dd if="$big" of=/dev/null bs=64M count=64 iflag=direct 2>&1 | tail -1
      drop_cache
      ;;
    load)
      drop_cache
      with_peak_rss "$dsv4" run --model "$dir" --backend cuda --prompt "$prompt" --max-tokens 1 \
        --dump-logits "$res/cuda.npy" --dump-hidden "$res/cuda_hidden.npz" 2>&1 | tee "$res/load.log"
      ;;
    oracle)
      for p in ref32 ref64; do
        flag=(); [ "$p" = ref64 ] && flag=(--ref64)
        with_peak_rss "$dsv4" run --model "$dir" --backend cpu "${flag[@]}" --threads 0 --prompt "$prompt" \
          --max-tokens 1 --dump-logits "$res/$p.npy" --dump-hidden "$res/${p}_hidden.npz" 2>&1 | tee "$res/$p.log"
      done
      ;;
    compare)
      python3 - "$res" <<'EOF'
import sys, numpy as np
res = sys.argv[1]
h = {k: np.load(f"{res}/{k}_hidden.npz") for k in ("cuda", "ref32", "ref64")}
T = len(h["ref64"]["tokens"])
lg = {k: np.load(f"{res}/{k}.npy")[:T].astype(np.float64) for k in ("cuda", "ref32", "ref64")}
def nrms(x, r): return float(np.sqrt(((x - r) ** 2).sum() / (r ** 2).sum()))
F = nrms(lg["ref32"], lg["ref64"]); B = nrms(lg["cuda"], lg["ref64"])
top = {k: lg[k].argmax(axis=1) for k in lg}
print(f"prompt: {T} tokens; logits of every prompt position")
print(f"F = NRMS(ref32, ref64) = {F:.3e}; NRMS(CUDA, ref64) = {B:.3e}; ratio {B / F:.3f} (gate <= 1.05)")
print(f"top-1 equal to ref64: CUDA {int((top['cuda'] == top['ref64']).sum())}/{T}, "
      f"ref32 {int((top['ref32'] == top['ref64']).sum())}/{T}")
print("gate:", "PASS" if B <= 1.05 * F and (top["cuda"] == top["ref64"]).all() else "FAIL")
print("streams, NRMS against ref64 over all positions:   layer   CUDA        ref32")
for k in sorted(x for x in h["ref64"].files if x != "tokens"):
    print(f"  {k:>12}   {nrms(h['cuda'][k], h['ref64'][k]):.3e}   {nrms(h['ref32'][k], h['ref64'][k]):.3e}")
EOF
      ;;
    *) echo "unknown step '$step' (synth, disk, load, oracle, compare)"; exit 2 ;;
  esac
done
