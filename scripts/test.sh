#!/usr/bin/env bash
# The whole default test suite: installs dependencies, builds, runs every CTest test (unit,
# integration, node-based references and end-to-end), then prints one closing count line.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${DSV4_BUILD_DIR:-$here/build}"
"$here/scripts/deps.sh" || exit 1
"$here/scripts/build.sh" || { echo "0 passed, 1 failed"; exit 1; }

log="$build/ctest.log"
(cd "$build" && ctest --output-on-failure -j "${DSV4_TEST_JOBS:-2}" --timeout 1500 "$@") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
total=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$log" | tail -1)
failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
total=${total:-0}; failed=${failed:-1}
skipped=$(grep -c '(Skipped)$' "$log")  # GPU tests without a GPU: reported, never counted as passed
echo "$((total - failed - skipped)) passed, ${failed} failed, ${skipped} skipped"
exit "$rc"
