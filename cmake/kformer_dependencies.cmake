# Finds Kokkos and (unless KFORMER_ENABLE_KOKKOS_KERNELS is off) Kokkos Kernels, and checks that
# they can build kformer before anything is generated: every problem is one FATAL_ERROR naming
# what was found and what is needed, so that no half-configured build is left to fail at link time.
#
# Where to look, in this order: Kokkos_ROOT / KokkosKernels_ROOT, CMAKE_PREFIX_PATH (cache or
# environment), then KFORMER_DEPS_PREFIX, which defaults to the prefix that cmake/bootstrap.sh
# built (${KFORMER_CACHE:-~/.cache/kformer}/host; pass .../cuda or .../hip for those variants).
# System locations are never searched: Debian bookworm's Trilinos 13.2 packages install Kokkos 3.4
# configs there whose include paths are broken, and a silent match on them is worse than an
# error. Pass -DKokkos_ROOT=/usr to use a system install (e.g. Debian sid's Kokkos 5 or Trilinos
# 16's Kokkos 4.5).
#
# Sets:
#   KFORMER_DEVICE_BACKEND         CUDA, HIP or "" (host only)
#   KFORMER_KOKKOS_CXX_STANDARD    the C++ standard Kokkos was built with (17, 20)
#   KFORMER_KOKKOSKERNELS_TARGET   the imported target of Kokkos Kernels (standalone installs
#                                  export Kokkos::kokkoskernels, Trilinos KokkosKernels::all_libs)
#   KFORMER_KOKKOSKERNELS_VERSION  its version (Trilinos installs have no version file)
if(DEFINED ENV{KFORMER_CACHE})
  set(_kformer_cache "$ENV{KFORMER_CACHE}")
elseif(DEFINED ENV{XDG_CACHE_HOME})
  set(_kformer_cache "$ENV{XDG_CACHE_HOME}/kformer")
else()
  set(_kformer_cache "$ENV{HOME}/.cache/kformer")
endif()
set(KFORMER_DEPS_PREFIX "${_kformer_cache}/host" CACHE PATH
    "Prefix holding Kokkos and Kokkos Kernels when neither Kokkos_ROOT nor CMAKE_PREFIX_PATH finds them")

set(KFORMER_MIN_KOKKOS_VERSION 3.4)
set(_kformer_find_options HINTS "${KFORMER_DEPS_PREFIX}"
    NO_SYSTEM_ENVIRONMENT_PATH NO_CMAKE_PACKAGE_REGISTRY NO_CMAKE_SYSTEM_PATH
    NO_CMAKE_SYSTEM_PACKAGE_REGISTRY)
find_package(Kokkos ${_kformer_find_options})
if(NOT Kokkos_FOUND)
  message(FATAL_ERROR "kformer: Kokkos not found (looked in Kokkos_ROOT, CMAKE_PREFIX_PATH and "
    "${KFORMER_DEPS_PREFIX}). Run cmake/bootstrap.sh, or point Kokkos_ROOT at an install of "
    "Kokkos >= ${KFORMER_MIN_KOKKOS_VERSION}.")
endif()
if(Kokkos_VERSION VERSION_LESS KFORMER_MIN_KOKKOS_VERSION)
  message(FATAL_ERROR "kformer: needs Kokkos >= ${KFORMER_MIN_KOKKOS_VERSION}, found "
    "${Kokkos_VERSION} in ${Kokkos_DIR}")
endif()

# A config whose headers are not where it says (Debian bookworm's Trilinos 13.2 Kokkos 3.4) would
# configure and then fail in every compile: refuse it here.
get_target_property(_kformer_kokkos_includes Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
foreach(dir IN LISTS _kformer_kokkos_includes)
  if(NOT dir MATCHES "\\$<" AND NOT EXISTS "${dir}")
    message(FATAL_ERROR "kformer: the Kokkos config in ${Kokkos_DIR} (Kokkos ${Kokkos_VERSION}) "
      "names the include directory ${dir}, which does not exist: a broken install (Debian "
      "bookworm's Trilinos 13.2 ships such configs). Run cmake/bootstrap.sh, or point Kokkos_ROOT "
      "at a working Kokkos >= ${KFORMER_MIN_KOKKOS_VERSION}.")
  endif()
endforeach()

# The C++ standard Kokkos requires of its users: Kokkos_CXX_STANDARD from 4.0 on, otherwise the
# cxx_std_NN compile feature of its target (3.4 has only that).
if(DEFINED Kokkos_CXX_STANDARD)
  set(KFORMER_KOKKOS_CXX_STANDARD ${Kokkos_CXX_STANDARD})
else()
  get_target_property(_kformer_features Kokkos::kokkos INTERFACE_COMPILE_FEATURES)
  set(KFORMER_KOKKOS_CXX_STANDARD 17)
  if(_kformer_features MATCHES "cxx_std_([0-9]+)")
    set(KFORMER_KOKKOS_CXX_STANDARD ${CMAKE_MATCH_1})
  endif()
endif()
if(KFORMER_KOKKOS_CXX_STANDARD LESS 17)
  message(FATAL_ERROR "kformer: needs a Kokkos built for C++17 or later; the one in ${Kokkos_DIR} "
    "(Kokkos ${Kokkos_VERSION}) was built for C++${KFORMER_KOKKOS_CXX_STANDARD}")
endif()
if(DEFINED CMAKE_CXX_STANDARD AND CMAKE_CXX_STANDARD LESS KFORMER_KOKKOS_CXX_STANDARD)
  message(FATAL_ERROR "kformer: CMAKE_CXX_STANDARD is ${CMAKE_CXX_STANDARD}, but Kokkos "
    "${Kokkos_VERSION} (${Kokkos_DIR}) was built for C++${KFORMER_KOKKOS_CXX_STANDARD}: configure "
    "with -DCMAKE_CXX_STANDARD=${KFORMER_KOKKOS_CXX_STANDARD} or later")
endif()

# Backends the build must have (e.g. -DKFORMER_REQUIRE_BACKENDS=CUDA): a Kokkos without one of them
# is refused instead of quietly building for the host only.
set(KFORMER_REQUIRE_BACKENDS "" CACHE STRING
    "Kokkos backends this build must have (SERIAL, OPENMP, THREADS, CUDA, HIP); empty: any")
foreach(backend IN LISTS KFORMER_REQUIRE_BACKENDS)
  string(TOUPPER "${backend}" _kformer_backend)
  if(NOT _kformer_backend IN_LIST Kokkos_DEVICES)
    message(FATAL_ERROR "kformer: KFORMER_REQUIRE_BACKENDS asks for ${_kformer_backend}, but Kokkos "
      "${Kokkos_VERSION} in ${Kokkos_DIR} has only: ${Kokkos_DEVICES}")
  endif()
endforeach()

option(KFORMER_ENABLE_KOKKOS_KERNELS
  "Use Kokkos Kernels (BLAS TPLs, cuBLAS) for GEMMs; off: kformer's Kokkos-native GEMM kernel" ON)
set(KFORMER_KOKKOSKERNELS_TARGET "")
set(KFORMER_KOKKOSKERNELS_VERSION "")
if(KFORMER_ENABLE_KOKKOS_KERNELS)
  find_package(KokkosKernels ${_kformer_find_options})
  if(NOT KokkosKernels_FOUND)
    message(FATAL_ERROR "kformer: Kokkos Kernels not found next to Kokkos (${Kokkos_DIR}). Point "
      "KokkosKernels_ROOT at it, or configure with -DKFORMER_ENABLE_KOKKOS_KERNELS=OFF to use "
      "kformer's Kokkos-native GEMM instead (e.g. for HIP without rocBLAS).")
  endif()
  if(TARGET Kokkos::kokkoskernels)
    set(KFORMER_KOKKOSKERNELS_TARGET Kokkos::kokkoskernels)
  elseif(TARGET KokkosKernels::all_libs)
    set(KFORMER_KOKKOSKERNELS_TARGET KokkosKernels::all_libs)
  else()
    message(FATAL_ERROR "kformer: the Kokkos Kernels config in ${KokkosKernels_DIR} defines neither "
      "Kokkos::kokkoskernels (a standalone install) nor KokkosKernels::all_libs (Trilinos)")
  endif()
  # The version from its config where it has one, else from the header it installs.
  set(KFORMER_KOKKOSKERNELS_VERSION "${KokkosKernels_VERSION}")
  if(NOT KFORMER_KOKKOSKERNELS_VERSION)
    get_target_property(_kformer_kk_includes ${KFORMER_KOKKOSKERNELS_TARGET}
                        INTERFACE_INCLUDE_DIRECTORIES)
    foreach(dir IN LISTS _kformer_kk_includes)
      if(EXISTS "${dir}/KokkosKernels_config.h")
        file(STRINGS "${dir}/KokkosKernels_config.h" _kformer_kk_version
             REGEX "#define KOKKOSKERNELS_VERSION_(MAJOR|MINOR|PATCH) ")
        string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3"
               KFORMER_KOKKOSKERNELS_VERSION "${_kformer_kk_version}")
        break()
      endif()
    endforeach()
  endif()
  # Kokkos Kernels is released in step with Kokkos and needs the same major.minor.
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _kformer_kokkos_mm "${Kokkos_VERSION}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _kformer_kk_mm "${KFORMER_KOKKOSKERNELS_VERSION}")
  if(NOT _kformer_kk_mm STREQUAL _kformer_kokkos_mm)
    message(FATAL_ERROR "kformer: Kokkos Kernels ${KFORMER_KOKKOSKERNELS_VERSION} "
      "(${KokkosKernels_DIR}) does not match Kokkos ${Kokkos_VERSION} (${Kokkos_DIR}): they must "
      "have the same major.minor version")
  endif()
endif()

message(STATUS "kformer: Kokkos ${Kokkos_VERSION} (C++${KFORMER_KOKKOS_CXX_STANDARD}) from ${Kokkos_DIR}")
if(KFORMER_ENABLE_KOKKOS_KERNELS)
  message(STATUS "kformer: Kokkos Kernels ${KFORMER_KOKKOSKERNELS_VERSION} from ${KokkosKernels_DIR}")
else()
  message(STATUS "kformer: without Kokkos Kernels (GEMMs by kformer's Kokkos-native kernel)")
endif()
message(STATUS "kformer: Kokkos devices: ${Kokkos_DEVICES}")

# Device code is compiled by the compiler Kokkos was built with: nvcc_wrapper (or Clang) for CUDA,
# hipcc (or a HIP-enabled Clang) for HIP. Either it is CMAKE_CXX_COMPILER, or Kokkos redirects the
# compile and link commands of the targets that use it to that compiler (kokkos_compilation, in
# 3.x to 5.x alike). Kokkos' config does the latter globally for CUDA unless told not to; where
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
