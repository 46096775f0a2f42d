#!/usr/bin/env bash
# Runs the Hugging Face cross-check on the GPU machine from a folder holding hf_v4_dump (built by
# the tests/hf_v4.cmake target), compare_v4.py and this script (tests/hf/README.md).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH="$here:$here/../lib:${LD_LIBRARY_PATH:-}"
cd "$here"
date -u; nproc; nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
python3 -c "import transformers.models.deepseek_v4.modeling_deepseek_v4 as m; print(m.__file__)" || true
work="${TMPDIR:-/tmp}/hf_v4_check"
rm -rf "$work"; mkdir -p "$work/small" "$work/tiny"
status=0
time ./hf_v4_dump "$work/small" small 1 160 || status=1
time python3 compare_v4.py "$work/small" '{"ratios":[0,0,4,32,4,32,4,32,4,32,4,32],"window":128,"index_topk":64}' || status=1
time ./hf_v4_dump "$work/tiny" tiny 1 48 || status=1
time python3 compare_v4.py "$work/tiny" '{"ratios":[0,0,4,16,4,16,4,16],"window":16,"index_topk":8}' || status=1
if [ "$status" != 0 ]; then
  python3 - <<'PY' || true
import inspect, transformers.models.deepseek_v4.configuration_deepseek_v4 as c
print(inspect.getsource(c)[:6000])
PY
fi
exit $status
