# libFuzzer targets (tests/fuzz); they build only when the compiler is clang.
add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/fuzz ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
