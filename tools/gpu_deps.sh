#!/usr/bin/env bash
# Copies the build dependencies that a GPU machine may lack (it has no network) from this machine
# into .gpu_deps/, which tools/gpu_check.sh uses when present; pass it in the device call's carry.
#   .gpu_deps/hwy: Google Highway's headers, libraries and CMake package (from libhwy-dev)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.gpu_deps/hwy
rm -rf "$dest"
for pkg in libhwy-dev libhwy1; do
  dpkg -L "$pkg" | while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in /usr/share/*) continue ;; esac
    mkdir -p "$dest/$(dirname "${f#/usr/}")"
    cp -a "$f" "$dest/${f#/usr/}"
  done
done
echo "gpu_deps: $(du -sh "$dest" | cut -f1) in $dest"
