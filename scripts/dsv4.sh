#!/usr/bin/env bash
# Installs what dsv4 needs, builds it, and runs `dsv4 <args>` (e.g. `scripts/dsv4.sh serve`).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/scripts/deps.sh"
"$here/scripts/build.sh" >&2
exec "${DSV4_BUILD_DIR:-$here/build}/dsv4" "$@"
