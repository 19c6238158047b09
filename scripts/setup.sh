#!/usr/bin/env bash
# Installs Strata's build and runtime dependencies from Debian 12 packages.
# Idempotent; run as root (or with sudo available). Skips apt when all packages are present.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkgconf ccache
      libopenblas-dev nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev
      libcpp-httplib-dev libmicrohttpd-dev libssl-dev zlib1g-dev libbrotli-dev
      libpcre2-dev libicu-dev libxxhash-dev libzstd-dev libhiredis-dev redis-server
      openmpi-bin libopenmpi-dev
      libzmq3-dev cppzmq-dev
      libgtest-dev libgmock-dev libbenchmark-dev curl
      chromium fonts-dejavu-core)  # headless browser for tests/dashboard_chromium_test
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "[setup] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] all packages present"
fi
