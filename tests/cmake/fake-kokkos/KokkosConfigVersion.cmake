# A stand-in Kokkos for tests/cmake/refusals.cmake: any version, set by the test.
set(PACKAGE_VERSION "${KFORMER_TEST_FAKE_KOKKOS_VERSION}")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
