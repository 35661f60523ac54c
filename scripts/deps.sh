#!/usr/bin/env bash
# Installs what building and testing cohort needs on Debian 12 (as root, or through sudo).
set -euo pipefail
pkgs="build-essential autoconf automake libtool pkg-config check libsubunit-dev libhwloc-dev
      iproute2 procps python3"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "deps.sh: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
