# Finds Kokkos and (unless KFORMER_ENABLE_KOKKOS_KERNELS is off) Kokkos Kernels.
#
# Where to look, in this order: Kokkos_ROOT / KokkosKernels_ROOT, CMAKE_PREFIX_PATH (cache or
# environment), then KFORMER_DEPS_PREFIX, which defaults to the prefix that cmake/bootstrap.sh
# built (${KFORMER_CACHE:-~/.cache/kformer}/host; pass .../cuda or .../hip for those variants).
# System locations are never searched: Debian's Trilinos packages install Kokkos 3.4 configs there
# whose include paths are broken, and a silent match on them is worse than an error. Pass
# -DKokkos_ROOT=/usr/... to use a system install.
#
# Sets KFORMER_DEVICE_BACKEND to CUDA, HIP or "" (host only).
if(DEFINED ENV{KFORMER_CACHE})
  set(_kformer_cache "$ENV{KFORMER_CACHE}")
elseif(DEFINED ENV{XDG_CACHE_HOME})
  set(_kformer_cache "$ENV{XDG_CACHE_HOME}/kformer")
else()
  set(_kformer_cache "$ENV{HOME}/.cache/kformer")
endif()
set(KFORMER_DEPS_PREFIX "${_kformer_cache}/host" CACHE PATH
    "Prefix holding Kokkos and Kokkos Kernels when neither Kokkos_ROOT nor CMAKE_PREFIX_PATH finds them")

set(_kformer_find_options HINTS "${KFORMER_DEPS_PREFIX}"
    NO_SYSTEM_ENVIRONMENT_PATH NO_CMAKE_PACKAGE_REGISTRY NO_CMAKE_SYSTEM_PATH
    NO_CMAKE_SYSTEM_PACKAGE_REGISTRY)
find_package(Kokkos REQUIRED ${_kformer_find_options})
option(KFORMER_ENABLE_KOKKOS_KERNELS
  "Use Kokkos Kernels (BLAS TPLs, cuBLAS) for GEMMs; off: kformer's Kokkos-native GEMM kernel" ON)
if(KFORMER_ENABLE_KOKKOS_KERNELS)
  find_package(KokkosKernels ${_kformer_find_options})
  if(NOT KokkosKernels_FOUND)
    message(FATAL_ERROR "kformer: Kokkos Kernels not found next to Kokkos (${Kokkos_DIR}). Point "
      "KokkosKernels_ROOT at it, or configure with -DKFORMER_ENABLE_KOKKOS_KERNELS=OFF to use "
      "kformer's Kokkos-native GEMM instead (e.g. for HIP without rocBLAS).")
  endif()
endif()

if(Kokkos_DIR MATCHES "[Tt]rilinos" OR KokkosKernels_DIR MATCHES "[Tt]rilinos")
  message(FATAL_ERROR "kformer: found Kokkos inside a Trilinos install (${Kokkos_DIR}); Debian's "
    "Trilinos configs are broken and C++14-only. Run cmake/bootstrap.sh, or point Kokkos_ROOT at a "
    "standalone Kokkos (>= 3.4, C++17).")
endif()
if(Kokkos_VERSION VERSION_LESS 3.4)
  message(FATAL_ERROR "kformer needs Kokkos >= 3.4, found ${Kokkos_VERSION} in ${Kokkos_DIR}")
endif()
message(STATUS "kformer: Kokkos ${Kokkos_VERSION} from ${Kokkos_DIR}")
if(KFORMER_ENABLE_KOKKOS_KERNELS)
  message(STATUS "kformer: Kokkos Kernels ${KokkosKernels_VERSION} from ${KokkosKernels_DIR}")
else()
  message(STATUS "kformer: without Kokkos Kernels (GEMMs by kformer's Kokkos-native kernel)")
endif()
message(STATUS "kformer: Kokkos devices: ${Kokkos_DEVICES}")

# Device code is compiled by the compiler Kokkos was built with: nvcc_wrapper (or Clang) for CUDA,
# hipcc (or a HIP-enabled Clang) for HIP. Either it is CMAKE_CXX_COMPILER, or Kokkos redirects the
# compile and link commands of the targets that use it to that compiler (kokkos_compilation, in
# 3.x and 4.x alike). Kokkos' config does the latter globally for CUDA unless told not to; where
# it did not, kformer asks for it for its own targets.
set(KFORMER_DEVICE_BACKEND "")
if("CUDA" IN_LIST Kokkos_DEVICES)
  set(KFORMER_DEVICE_BACKEND CUDA)
elseif("HIP" IN_LIST Kokkos_DEVICES)
  set(KFORMER_DEVICE_BACKEND HIP)
endif()
if(KFORMER_DEVICE_BACKEND STREQUAL "CUDA" AND COMMAND kokkos_compilation
   AND COMMAND kokkos_compiler_is_nvcc)
  kokkos_compiler_is_nvcc(_kformer_compiler_is_nvcc ${CMAKE_CXX_COMPILER})
  get_property(_kformer_launcher GLOBAL PROPERTY RULE_LAUNCH_COMPILE)
  if(NOT _kformer_compiler_is_nvcc AND NOT _kformer_launcher)
    kokkos_compilation(PROJECT)
  endif()
endif()

find_package(ZLIB REQUIRED)
