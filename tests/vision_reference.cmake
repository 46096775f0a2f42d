# vision_dump: the oracle side of the vision tower cross-check against DeepSeek's reference vision.py
# (tests/reference/vision/README.md). A tool, not a CTest entry: run_device.sh runs it beside torch.
add_executable(vision_dump ${CMAKE_CURRENT_SOURCE_DIR}/reference/vision/vision_dump.cc)
target_link_libraries(vision_dump PRIVATE dsv4_cpu dsv4_family dsv4_core)
