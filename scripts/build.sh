#!/usr/bin/env bash
# Configures and builds kformer against the bootstrap's dependencies (installing them first on a
# fresh Debian machine). Used by scripts/run, scripts/test, scripts/compile-check and
# scripts/gpu-check.
#
#   [KFORMER_VARIANT=host|cuda|hip] scripts/build.sh [BUILD_DIR] [extra cmake arguments...]
#
# The variant is the bootstrap's (default host): cuda compiles with Kokkos' nvcc_wrapper, hip with
# hipcc and without Kokkos Kernels (kformer's own GEMM kernel). KFORMER_TARGETS (space-separated)
# limits the build to those targets.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
shift || true
variant=${KFORMER_VARIANT:-host}
prefix=$("$root/cmake/bootstrap.sh" "$variant")
variant_args=()
case "$variant" in
  cuda)
    # nvcc_wrapper finds nvcc through CUDA_ROOT, also when ninja re-runs it later from this shell.
    export CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
    variant_args=(-DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper")
    ;;
  hip) variant_args=(-DCMAKE_CXX_COMPILER=hipcc -DKFORMER_ENABLE_KOKKOS_KERNELS=OFF) ;;
esac
# Compiles are cached outside the clone (ccache, installed by the bootstrap), so that a fresh clone
# on a machine that built kformer before recompiles only what changed: for every variant (ccache
# runs nvcc_wrapper and hipcc like any compiler, and compiles uncached what it cannot cache).
# The host variant trains over MPI too (the bootstrap installs Open MPI), so that its tests run.
[ "$variant" = host ] && command -v mpicxx >/dev/null && variant_args+=(-DKFORMER_ENABLE_MPI=ON)
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-${KFORMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kformer}/ccache}
  # No CCACHE_BASEDIR: it would make __FILE__ relative, which tests use to find their files.
  variant_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKFORMER_DEPS_PREFIX="$prefix" "${variant_args[@]}" "$@" >&2
targets=()
for t in ${KFORMER_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "${KFORMER_JOBS:-$(nproc)}" "${targets[@]}" >&2
