#!/usr/bin/env bash
# Installs whichever of the Debian packages named as arguments are missing.
# An argument package:command is satisfied by the command being on PATH too
# (Node.js from NodeSource brings npm without Debian's npm package).
# Safe to run twice: installed packages are left alone and apt is not touched.
set -euo pipefail
missing=()
for arg in "$@"; do
  pkg=${arg%%:*}
  cmd=${arg#*:}
  if [ "$cmd" != "$arg" ] && command -v "$cmd" >/dev/null 2>&1; then
    continue
  fi
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "tenantry needs these Debian packages: ${missing[*]}; this machine has no apt-get, install their equivalents." >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "tenantry needs these Debian packages: ${missing[*]}; run as root or install them: apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "installing Debian packages: ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
