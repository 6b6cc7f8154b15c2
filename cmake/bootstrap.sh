#!/usr/bin/env bash
# Dependency bootstrap for kformer on Debian bookworm.
#
#   cmake/bootstrap.sh [host|cuda|hip]      (default: host)
#
# Installs the Debian packages the build needs, fetches Debian's trilinos 13.2 source package,
# extracts only packages/kokkos and packages/kokkos-kernels, and builds Kokkos 3.4.01 and Kokkos
# Kernels 3.4.01 into a cache prefix outside the build tree. Prints that prefix on stdout (and
# nothing else); progress goes to stderr. A second run with the cache present only checks stamps.
#
# Variants (each in its own prefix):
#   host  Serial + OpenMP, C++17, shared libraries; Kokkos Kernels with OpenBLAS (OpenMP build)
#         as BLAS TPL, ETI off.
#   cuda  Serial + CUDA (Ampere80: sm_80 code plus compute_80 PTX, which newer GPUs JIT-compile),
#         lambdas on, static libraries, compiled with Kokkos' nvcc_wrapper around g++; Kokkos
#         Kernels with cuBLAS and OpenBLAS, ETI off. Needs the CUDA toolkit in $CUDA_ROOT
#         (default /usr/local/cuda); Kokkos 3.4 gets the patches in cmake/patches/ for CUDA 13.
#   hip   Serial + HIP (Vega908: gfx908, MI100; Kokkos 3.4 knows no gfx90a), static libraries,
#         compiled with Debian's hipcc; no Kokkos Kernels (see build_hip).
#
# $KFORMER_CACHE/<variant> is a link to the variant's current prefix; CMake's default place to look.
#
# Environment:
#   KFORMER_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kformer)
#   KFORMER_JOBS   parallel build jobs (default: nproc)
#   CUDA_ROOT      CUDA toolkit for the cuda variant (default: /usr/local/cuda)
set -euo pipefail

variant=${1:-host}
cache=${KFORMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kformer}
jobs=${KFORMER_JOBS:-$(nproc)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Bump a variant's number when its build recipe below changes, so that old caches are not reused.
# (Changes to the patch files are noticed without it: their checksum is part of the prefix.)
declare -A recipe=([host]=2 [cuda]=1 [hip]=1)

log() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $*"
  fi
}

# --- Debian packages ------------------------------------------------------------------------
host_packages=(g++ cmake ninja-build make git ca-certificates xz-utils ccache
  libopenblas-openmp-dev catch2 nlohmann-json3-dev libcli11-dev zlib1g-dev python3-matplotlib
  gnuplot-nox  # scripts/run's loss curves
  libopenmpi-dev openmpi-bin  # data-parallel training and its 2-rank tests
  clang libclang-rt-14-dev libomp-14-dev)  # for scripts/fuzz: clang 14, libFuzzer, OpenMP
cuda_packages=(patch)
hip_packages=(hipcc libamdhip64-dev)

install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -q >&2
  as_root apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# --- Kokkos sources from Debian's trilinos source package -------------------------------------
src_root=$cache/src/trilinos-13.2.0
kokkos_src=$src_root/packages/kokkos
kernels_src=$src_root/packages/kokkos-kernels

ensure_deb_src() {
  if grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    return 0
  fi
  log "adding a deb-src entry for bookworm"
  as_root tee /etc/apt/sources.list.d/kformer-deb-src.sources >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  as_root apt-get update -q >&2
}

fetch_sources() {
  [ -f "$src_root/.complete" ] && return 0
  # Variants build under their own locks; the shared source tree has one of its own.
  mkdir -p "$cache/src"
  exec 8>"$cache/src/.lock"
  flock 8
  [ -f "$src_root/.complete" ] && { flock -u 8; return 0; }
  ensure_deb_src
  local dl=$cache/src/download
  rm -rf "$dl" "$src_root" && mkdir -p "$dl" "$src_root"
  log "downloading Debian's trilinos source package (~166 MB)"
  # apt verifies the checksums against the signed Sources index.
  (cd "$dl" && apt-get source --download-only trilinos=13.2.0-4 >&2 2>&1 ||
    apt-get source --download-only trilinos >&2)
  local tarball
  tarball=$(ls "$dl"/trilinos_13.2.0.orig.tar.* 2>/dev/null | head -n1)
  [ -n "$tarball" ] || die "trilinos 13.2.0 source tarball not found after apt-get source"
  log "extracting packages/kokkos and packages/kokkos-kernels"
  tar -xf "$tarball" -C "$src_root" --strip-components=1 --wildcards \
    '*/packages/kokkos/*' '*/packages/kokkos-kernels/*'
  [ -f "$kokkos_src/CMakeLists.txt" ] && [ -f "$kernels_src/CMakeLists.txt" ] ||
    die "extraction did not produce packages/kokkos and packages/kokkos-kernels"
  rm -rf "$dl"
  touch "$src_root/.complete"
  flock -u 8
}

# --- builds -----------------------------------------------------------------------------------
build_host() {
  local prefix=$cache/kokkos-3.4.01-host-r${recipe[host]}
  [ -f "$prefix/.complete" ] && { echo "$prefix"; return 0; }
  fetch_sources
  local blas_dir=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)/openblas-openmp
  [ -f "$blas_dir/libopenblas.so" ] || die "OpenBLAS (OpenMP build) not found in $blas_dir"
  local work=$cache/build/host
  rm -rf "$work" "$prefix"
  log "building Kokkos 3.4.01 (Serial + OpenMP, C++17) into $prefix"
  cmake -S "$kokkos_src" -B "$work/kokkos" -G Ninja -Wno-dev \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
    -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON >&2
  cmake --build "$work/kokkos" -j "$jobs" >&2
  cmake --install "$work/kokkos" >&2
  log "building Kokkos Kernels 3.4.01 (BLAS TPL = OpenBLAS/OpenMP, ETI off)"
  # F77_BLAS_MANGLE given explicitly: otherwise Kokkos Kernels enables Fortran to detect it.
  # The RPATH makes libkokkoskernels load the OpenMP build of OpenBLAS (same soname as the
  # pthread build that Debian's alternatives may prefer), which shares Kokkos' OpenMP threads
  # instead of spinning its own pool beside them.
  cmake -S "$kernels_src" -B "$work/kernels" -G Ninja -Wno-dev \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
    -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DKokkos_ROOT="$prefix" -DKokkosKernels_ADD_DEFAULT_ETI=OFF \
    -DKokkosKernels_ENABLE_TPL_BLAS=ON -DKokkosKernels_ENABLE_TPL_LAPACK=OFF \
    "-DF77_BLAS_MANGLE=(name,NAME) name ## _" \
    -DBLAS_LIBRARIES=openblas -DBLAS_LIBRARY_DIRS="$blas_dir" \
    -DCMAKE_INSTALL_RPATH="$blas_dir" >&2
  cmake --build "$work/kernels" -j "$jobs" >&2
  cmake --install "$work/kernels" >&2
  rm -rf "$work"
  touch "$prefix/.complete"
  # Prefixes of older recipes are never used again.
  find "$cache" -maxdepth 1 -name 'kokkos-3.4.01-host-r*' ! -path "$prefix" -exec rm -rf {} + 
  echo "$prefix"
}

# A copy of Kokkos' source in $1 with the given patches from cmake/patches/ applied (the shared
# source tree stays pristine for the other variants).
patched_kokkos_source() {
  local dest=$1
  shift
  rm -rf "$dest" && mkdir -p "$(dirname "$dest")"
  cp -a "$kokkos_src" "$dest"
  local p
  for p in "$@"; do
    log "applying $p"
    patch -d "$dest" -p1 --batch --forward --silent <"$here/patches/$p" >&2 ||
      die "patch $p does not apply to $kokkos_src"
  done
}

# A short checksum of the given patch files, part of the prefix's name.
patches_id() {
  (cd "$here/patches" && cat "$@") | sha256sum | cut -c1-8
}

cuda_patches=(kokkos-3.4.01-nvcc-wrapper-default-arch.patch kokkos-3.4.01-cuda13-half.patch
  kokkos-3.4.01-cuda13-prefetch.patch kokkos-3.4.01-cuda-arch-check.patch)

build_cuda() {
  local prefix
  prefix=$cache/kokkos-3.4.01-cuda-r${recipe[cuda]}-$(patches_id "${cuda_patches[@]}")
  [ -f "$prefix/.complete" ] && { echo "$prefix"; return 0; }
  [ -x "$CUDA_ROOT/bin/nvcc" ] || die "nvcc not found in $CUDA_ROOT/bin (set CUDA_ROOT)"
  fetch_sources
  local blas_dir=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)/openblas-openmp
  [ -f "$blas_dir/libopenblas.so" ] || die "OpenBLAS (OpenMP build) not found in $blas_dir"
  local work=$cache/build/cuda
  rm -rf "$work" "$prefix"
  patched_kokkos_source "$work/kokkos-src" "${cuda_patches[@]}"
  # nvcc_wrapper finds nvcc through CUDA_ROOT. The compiler is the copy in the prefix (the install
  # puts the same file there): Kokkos records its path for kokkos_launch_compiler, which
  # consumers that keep g++ as their compiler go through, so it must outlive the build tree.
  export CUDA_ROOT
  mkdir -p "$prefix/bin"
  cp "$work/kokkos-src/bin/nvcc_wrapper" "$prefix/bin/"
  log "building Kokkos 3.4.01 (Serial + CUDA Ampere80, $("$CUDA_ROOT/bin/nvcc" --version | tail -n1)) into $prefix"
  # -arch=sm_80, which Kokkos passes for Ampere80, embeds compute_80 PTX beside the sm_80 code.
  cmake -S "$work/kokkos-src" -B "$work/kokkos" -G Ninja -Wno-dev \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
    -DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper" \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON \
    -DKokkos_ARCH_AMPERE80=ON >&2
  cmake --build "$work/kokkos" -j "$jobs" >&2
  cmake --install "$work/kokkos" >&2
  log "building Kokkos Kernels 3.4.01 (cuBLAS, BLAS TPL = OpenBLAS/OpenMP, ETI off)"
  cmake -S "$kernels_src" -B "$work/kernels" -G Ninja -Wno-dev \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
    -DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper" \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DKokkos_ROOT="$prefix" -DKokkosKernels_ADD_DEFAULT_ETI=OFF \
    -DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF \
    -DKokkosKernels_ENABLE_TPL_BLAS=ON -DKokkosKernels_ENABLE_TPL_LAPACK=OFF \
    "-DF77_BLAS_MANGLE=(name,NAME) name ## _" \
    -DBLAS_LIBRARIES=openblas -DBLAS_LIBRARY_DIRS="$blas_dir" >&2
  cmake --build "$work/kernels" -j "$jobs" >&2
  cmake --install "$work/kernels" >&2
  rm -rf "$work"
  touch "$prefix/.complete"
  find "$cache" -maxdepth 1 -name 'kokkos-3.4.01-cuda-r*' ! -path "$prefix" -exec rm -rf {} +
  echo "$prefix"
}

build_hip() {
  local prefix=$cache/kokkos-3.4.01-hip-r${recipe[hip]}
  [ -f "$prefix/.complete" ] && { echo "$prefix"; return 0; }
  command -v hipcc >/dev/null || die "hipcc not found"
  fetch_sources
  local work=$cache/build/hip
  rm -rf "$work" "$prefix"
  # Without a GPU, hipcc's rocm_agent_enumerator prints a Python traceback at every call; the
  # architecture comes from Kokkos' flag, so it is only noise.
  log "building Kokkos 3.4.01 (Serial + HIP Vega908/gfx908, hipcc $(hipcc --version 2>/dev/null | sed -n 's/^HIP version: //p')) into $prefix"
  cmake -S "$kokkos_src" -B "$work/kokkos" -G Ninja -Wno-dev \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
    -DCMAKE_CXX_COMPILER=hipcc -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_HIP=ON -DKokkos_ARCH_VEGA908=ON >&2
  cmake --build "$work/kokkos" -j "$jobs" >&2
  cmake --install "$work/kokkos" >&2
  # Kokkos Kernels builds for HIP with ETI off, but Debian has no rocBLAS for it to call, and
  # kformer's own GEMM kernel is the one its tests check on GPUs: the variant goes without it.
  rm -rf "$work"
  touch "$prefix/.complete"
  find "$cache" -maxdepth 1 -name 'kokkos-3.4.01-hip-r*' ! -path "$prefix" -exec rm -rf {} +
  echo "$prefix"
}

# $cache/<variant> always points at the variant's current prefix: CMake looks there by default.
link_current() {
  ln -sfn "$(basename "$1")" "$cache/$2"
  echo "$1"
}

case "$variant" in
  host | cuda | hip) ;;
  *) die "unknown variant '$variant' (expected host, cuda or hip)" ;;
esac
mkdir -p "$cache"
# One lock per variant: a long GPU build does not hold up the host build beside it.
exec 9>"$cache/.lock-$variant"
flock 9

case "$variant" in
  host)
    install_packages "${host_packages[@]}"
    link_current "$(build_host)" host
    ;;
  cuda)
    CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
    install_packages "${host_packages[@]}" "${cuda_packages[@]}"
    link_current "$(build_cuda)" cuda
    ;;
  hip)
    install_packages "${host_packages[@]}" "${hip_packages[@]}"
    link_current "$(build_hip)" hip
    ;;
esac
