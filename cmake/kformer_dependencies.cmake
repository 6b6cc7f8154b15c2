# Finds Kokkos and Kokkos Kernels.
#
# Where to look, in this order: Kokkos_ROOT / KokkosKernels_ROOT, CMAKE_PREFIX_PATH (cache or
# environment), then KFORMER_DEPS_PREFIX, which defaults to the prefix that cmake/bootstrap.sh
# built (${KFORMER_CACHE:-~/.cache/kformer}/host). System locations are never searched: Debian's
# Trilinos packages install Kokkos 3.4 configs there whose include paths are broken, and a silent
# match on them is worse than an error. Pass -DKokkos_ROOT=/usr/... to use a system install.
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
find_package(KokkosKernels REQUIRED ${_kformer_find_options})

if(Kokkos_DIR MATCHES "[Tt]rilinos" OR KokkosKernels_DIR MATCHES "[Tt]rilinos")
  message(FATAL_ERROR "kformer: found Kokkos inside a Trilinos install (${Kokkos_DIR}); Debian's "
    "Trilinos configs are broken and C++14-only. Run cmake/bootstrap.sh, or point Kokkos_ROOT at a "
    "standalone Kokkos (>= 3.4, C++17).")
endif()
if(Kokkos_VERSION VERSION_LESS 3.4)
  message(FATAL_ERROR "kformer needs Kokkos >= 3.4, found ${Kokkos_VERSION} in ${Kokkos_DIR}")
endif()
message(STATUS "kformer: Kokkos ${Kokkos_VERSION} from ${Kokkos_DIR}")
message(STATUS "kformer: Kokkos Kernels ${KokkosKernels_VERSION} from ${KokkosKernels_DIR}")
message(STATUS "kformer: Kokkos devices: ${Kokkos_DEVICES}")

find_package(ZLIB REQUIRED)
