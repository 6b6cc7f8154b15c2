# Installs the kformer build into a scratch prefix, then configures, builds and runs the consumer
# project against that install, and the README's C++ example with it. Called by CTest with
# BUILD_DIR, SOURCE_DIR, WORK_DIR, README, ONLINE_TRAINING_DIR (examples/online_training) and
# SIMULATION_DIR (examples/simulation, a CMake project of its own, configured as a user would).
file(REMOVE_RECURSE "${WORK_DIR}")
# The README's first ```cpp block, as a source file of its own.
file(READ "${README}" readme)
string(REGEX MATCH "```cpp\n([^`]*)```" block "${readme}")
if(NOT CMAKE_MATCH_1)
  message(FATAL_ERROR "${README} has no ```cpp block to build")
endif()
file(WRITE "${WORK_DIR}/readme_example.cpp" "${CMAKE_MATCH_1}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/install")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G Ninja
    "-Dkformer_ROOT=${WORK_DIR}/install" -DCMAKE_BUILD_TYPE=Release
    "-DREADME_EXAMPLE=${WORK_DIR}/readme_example.cpp" "-DONLINE_TRAINING_DIR=${ONLINE_TRAINING_DIR}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
execute_process(COMMAND "${WORK_DIR}/build/consumer" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer failed (${rc})")
endif()
execute_process(COMMAND "${WORK_DIR}/build/readme_example" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the README's C++ example failed (${rc}):\n${out}")
endif()
message("readme_example: the README's C++ example built and ran")
foreach(program online_training_c online_training_fortran)
  if(EXISTS "${WORK_DIR}/build/${program}")
    execute_process(COMMAND "${WORK_DIR}/build/${program}" "${WORK_DIR}/${program}.safetensors"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0 OR NOT out MATCHES "reloaded model: same outputs")
      message(FATAL_ERROR "${program} against the installed package failed (${rc}):\n${out}")
    endif()
    message("${program}: built against the installed package and ran")
  endif()
endforeach()
# The C++ simulation example: its own project, find_package(kformer) and nothing else.
run(${CMAKE_COMMAND} -S "${SIMULATION_DIR}" -B "${WORK_DIR}/simulation" -G Ninja
    "-Dkformer_ROOT=${WORK_DIR}/install" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/simulation")
execute_process(COMMAND "${WORK_DIR}/simulation/simulation" "${WORK_DIR}/simulation_model.safetensors"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "reloaded model: same outputs")
  message(FATAL_ERROR "examples/simulation against the installed package failed (${rc}):\n${out}")
endif()
message("examples/simulation: built against the installed package and ran:\n${out}")
