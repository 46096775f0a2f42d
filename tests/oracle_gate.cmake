# The whole-model gate on the CPU (docs/numerics.md): oracle_gate_fma is the oracle's sources
# compiled again with fused multiply-adds (another valid float order, a stand-in for a second
# correct backend); oracle_gate_test checks that it passes the gate and that worse backends fail it.
if(DSV4_TESTS AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  file(GLOB gate_cpu_srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/cpu/*.cc)
  list(FILTER gate_cpu_srcs EXCLUDE REGEX "_(test|bench)\\.cc$")
  add_executable(oracle_gate_fma ${CMAKE_CURRENT_SOURCE_DIR}/gate/oracle_gate_fma_main.cc ${gate_cpu_srcs})
  target_include_directories(oracle_gate_fma PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(oracle_gate_fma PRIVATE dsv4_family dsv4_lanes dsv4_engine)
  target_compile_options(oracle_gate_fma PRIVATE -mfma -ffp-contract=fast)
  # The weights are the plain build's: family::synthetic_weights and the EXL3 gate weights
  # (family::exl3_gate_weights) come from the plain dsv4_family library, not from these sources.
  set_target_properties(oracle_gate_fma PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})

  add_executable(oracle_gate_test ${CMAKE_CURRENT_SOURCE_DIR}/gate/oracle_gate_test.cc)
  target_link_libraries(oracle_gate_test PRIVATE dsv4_cpu GTest::gtest GTest::gtest_main)
  target_compile_definitions(oracle_gate_test PRIVATE
    DSV4_SOURCE_DIR="${PROJECT_SOURCE_DIR}" DSV4_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_dependencies(oracle_gate_test oracle_gate_fma)
  add_test(NAME oracle_gate COMMAND oracle_gate_test WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endif()
