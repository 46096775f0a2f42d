#!/usr/bin/env bash
# Installs the build and test dependencies from Debian 12's packages and the npm registry.
# Idempotent: skips apt-get when every package is already installed.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

packages=(build-essential cmake ninja-build pkg-config git ccache
  nlohmann-json3-dev libfmt-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libonig-dev libicu-dev libxxhash-dev libcpp-httplib-dev libssl-dev zlib1g-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js may come from Debian (nodejs + npm) or from a vendor package that bundles npm.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Node packages for the independent references and end-to-end tests (tests/js/package.json);
# reinstalled whenever package.json or the lock file changes.
js="$here/tests/js"
if [ -f "$js/package.json" ]; then
  stamp=$(cat "$js/package.json" "$js/package-lock.json" 2>/dev/null | md5sum | cut -d' ' -f1)
  if [ "$(cat "$js/node_modules/.dsv4-stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "deps: npm install in tests/js"
    (cd "$js" && npm install --no-audit --no-fund --loglevel=error)
    echo "$stamp" > "$js/node_modules/.dsv4-stamp"
  fi
fi
