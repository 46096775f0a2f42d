#!/usr/bin/env bash
# Configures and builds dsv4 into build/ (or $DSV4_BUILD_DIR) with Ninja; extra args go to cmake.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${DSV4_BUILD_DIR:-$here/build}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}"  # share the cache across checkouts
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@"
fi
cmake --build "$build" -j "${DSV4_JOBS:-$(nproc)}"
