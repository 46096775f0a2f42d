# NCCL for the fabric (src/fabric/nccl): the communicator, its ordered-sum kernel and its 2-GPU test.
# Built when CUDA and NCCL (nccl.h + libnccl) are found; the CPU fabric (dsv4_fabric) never needs them.
set(DSV4_HAVE_NCCL OFF)
if(DSV4_HAVE_CUDA)
  find_path(DSV4_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(DSV4_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(DSV4_NCCL_INCLUDE AND DSV4_NCCL_LIBRARY)
    set(DSV4_HAVE_NCCL ON)
    message(STATUS "dsv4: NCCL found (${DSV4_NCCL_LIBRARY}): building dsv4_fabric_nccl")
    file(GLOB nccl_srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/fabric/nccl/*.cu
         ${PROJECT_SOURCE_DIR}/src/fabric/nccl/*.cc)
    list(FILTER nccl_srcs EXCLUDE REGEX "_(test|bench)\\.(cc|cu)$")
    add_library(dsv4_fabric_nccl STATIC ${nccl_srcs})
    target_include_directories(dsv4_fabric_nccl PUBLIC ${PROJECT_SOURCE_DIR}/src ${DSV4_NCCL_INCLUDE})
    target_link_libraries(dsv4_fabric_nccl PUBLIC dsv4_fabric CUDA::cudart ${DSV4_NCCL_LIBRARY})
    target_compile_definitions(dsv4_fabric_nccl PUBLIC DSV4_HAVE_NCCL=1)
    if(DSV4_TESTS)
      # Its own main: it starts two rank processes (no CUDA in the parent), each on its own GPU; exits 77
      # (skipped) with fewer than two GPUs.
      add_executable(fabric_nccl_test ${PROJECT_SOURCE_DIR}/src/fabric/nccl/nccl_comm_test.cc)
      target_link_libraries(fabric_nccl_test PRIVATE dsv4_fabric_nccl)
      target_link_options(fabric_nccl_test PRIVATE -Wl,--as-needed)
      set_target_properties(fabric_nccl_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
      add_test(NAME gpu_fabric_nccl COMMAND fabric_nccl_test)
      set_tests_properties(gpu_fabric_nccl PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
    endif()
  endif()
endif()
