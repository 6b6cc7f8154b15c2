# A stand-in Kokkos for tests/cmake/refusals.cmake: a version and backends, and a target with
# an include directory that exists, so that only the version or backends can be refused.
set(Kokkos_VERSION "${KFORMER_TEST_FAKE_KOKKOS_VERSION}")
set(Kokkos_DEVICES "${KFORMER_TEST_FAKE_KOKKOS_DEVICES}")
if(NOT TARGET Kokkos::kokkos)
  add_library(Kokkos::kokkos INTERFACE IMPORTED)
  set_target_properties(Kokkos::kokkos PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}"
    INTERFACE_COMPILE_FEATURES cxx_std_17)
endif()
