# Configurations kformer must refuse, each with one clear CMake error naming what was found and
# what is needed, and without leaving a generated build behind:
#   building kformer:  a too old Kokkos, a backend asked for that Kokkos lacks, C++14;
#   a consumer of the installed package:  another Kokkos version than kformer's, C++14.
# Called by CTest with BUILD_DIR, SOURCE_DIR (kformer's), WORK_DIR, CXX_COMPILER, KOKKOS_DIR and
# KOKKOS_DEVICES (those of this build).
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE "${WORK_DIR}")
set(fake "${SOURCE_DIR}/tests/cmake/fake-kokkos")

# expect_refusal(NAME SOURCE PATTERN args...): configuring SOURCE must fail with PATTERN in the
# output, and generate no build system.
function(expect_refusal name source pattern)
  set(dir "${WORK_DIR}/${name}")
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${source}" -B "${dir}" -G Ninja
                          "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(REGEX REPLACE "[ \n]+" " " flat "${out}")
  if(rc EQUAL 0)
    message(SEND_ERROR "${name}: configured, but should have been refused\n${out}")
  elseif(NOT flat MATCHES "${pattern}")
    message(SEND_ERROR "${name}: refused, but the message does not match '${pattern}':\n${out}")
  elseif(EXISTS "${dir}/build.ninja")
    message(SEND_ERROR "${name}: refused, but a build.ninja was generated")
  else()
    message(STATUS "${name}: refused as expected")
  endif()
endfunction()

set(kformer_options -DKFORMER_BUILD_TESTS=OFF -DKFORMER_BUILD_PERF=OFF -DKFORMER_BUILD_APPS=OFF
    "-DKokkos_ROOT=${KOKKOS_DIR}")
expect_refusal(old_kokkos "${SOURCE_DIR}" "needs Kokkos >= 3.4, found 3.2.0"
  -DKFORMER_BUILD_TESTS=OFF -DKFORMER_BUILD_PERF=OFF -DKFORMER_BUILD_APPS=OFF
  "-DKokkos_ROOT=${fake}" -DKFORMER_TEST_FAKE_KOKKOS_VERSION=3.2.0
  -DKFORMER_TEST_FAKE_KOKKOS_DEVICES=SERIAL)
foreach(backend CUDA HIP OPENMP SERIAL)
  if(NOT backend IN_LIST KOKKOS_DEVICES)
    expect_refusal(missing_backend "${SOURCE_DIR}" "asks for ${backend}.* has only"
      ${kformer_options} -DKFORMER_REQUIRE_BACKENDS=${backend})
    break()
  endif()
endforeach()
expect_refusal(cxx14 "${SOURCE_DIR}" "CMAKE_CXX_STANDARD is 14.*was built for C\\+\\+"
  ${kformer_options} -DCMAKE_CXX_STANDARD=14)

# The consumer project against this build's install.
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/install"
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed: ${out}")
endif()
set(consumer "${SOURCE_DIR}/tests/consumer")
expect_refusal(consumer_other_kokkos "${consumer}"
  "was built with Kokkos [0-9.]+ .*found Kokkos 9.9.9"
  "-Dkformer_ROOT=${WORK_DIR}/install" "-DKokkos_ROOT=${fake}"
  -DKFORMER_TEST_FAKE_KOKKOS_VERSION=9.9.9 "-DKFORMER_TEST_FAKE_KOKKOS_DEVICES=${KOKKOS_DEVICES}")
expect_refusal(consumer_cxx14 "${consumer}" "built as C\\+\\+[0-9]+.*CMAKE_CXX_STANDARD 14"
  "-Dkformer_ROOT=${WORK_DIR}/install" -DCMAKE_CXX_STANDARD=14)
