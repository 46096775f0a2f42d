# hf_v4_dump: the oracle side of the Hugging Face DeepSeek-V4 cross-check (tests/hf/README.md).
# A tool, not a CTest entry: it runs on the GPU machine next to transformers. --as-needed keeps
# the tokenizer's shared libraries (ICU, oniguruma) out of it, since it uses none of their code.
add_executable(hf_v4_dump ${CMAKE_CURRENT_SOURCE_DIR}/hf/hf_v4_dump.cc)
target_link_libraries(hf_v4_dump PRIVATE dsv4_cpu dsv4_family dsv4_core)
target_link_options(hf_v4_dump PRIVATE -Wl,--as-needed)
