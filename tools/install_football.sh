#!/usr/bin/env bash
# Installs the `football` extra: Google Research Football 2.10.2 and the old gym it needs.
#
# gfootball ships only as source, and its C++ engine takes 15-25 minutes to compile on 2 cores,
# so the built wheel is kept in a cache folder (LAMARCKIAN_WHEEL_CACHE, default
# /var/cache/lamarckian-hpc/wheels) and a later install takes seconds. The build script imports
# psutil outside pip's isolated build, hence --no-build-isolation with psutil installed first.
set -euo pipefail
cache="${LAMARCKIAN_WHEEL_CACHE:-/var/cache/lamarckian-hpc/wheels}"
mkdir -p "$cache"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=(build-essential cmake python3-dev libgl1-mesa-dev libegl-dev libsdl2-dev libsdl2-image-dev
        libsdl2-ttf-dev libsdl2-gfx-dev libboost-thread-dev libboost-system-dev
        libboost-filesystem-dev libboost-python-dev)
  missing=()
  for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
# The build needs psutil, setuptools and wheel; the engine's runtime needs are the extra's.
pip install -q -c "$root/constraints.txt" psutil setuptools wheel
pip install -q -c "$root/constraints.txt" -e "$root[football]"
if ! ls "$cache"/gfootball-2.10.2-*.whl >/dev/null 2>&1; then
  echo "building gfootball 2.10.2 (15-25 minutes on 2 cores); the wheel is kept in $cache"
  pip wheel -q --no-build-isolation --no-deps "gfootball==2.10.2" -w "$cache"
fi
# --no-deps: its own requirements name opencv-python, which would clash with the headless build.
pip install -q --no-deps "$cache"/gfootball-2.10.2-*.whl
python3 -c "import gfootball.env; print('gfootball', 'ready')"
