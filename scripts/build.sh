#!/usr/bin/env bash
# Configures and builds kformer against the bootstrap's dependencies (installing them first on a
# fresh Debian machine). Used by scripts/run and scripts/test.
#
#   scripts/build.sh [BUILD_DIR] [extra cmake arguments...]      (default: build)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
shift || true
prefix=$("$root/cmake/bootstrap.sh" host)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKFORMER_DEPS_PREFIX="$prefix" "$@" >&2
cmake --build "$build" -j "${KFORMER_JOBS:-$(nproc)}" >&2
