# Embeds the V4.1 tokenizer.json (gzip) into dsv4_tokenizer: v41_tokenizer.cc includes the bytes
# with .incbin; OBJECT_DEPENDS rebuilds it when the data changes.
find_package(ZLIB REQUIRED)
set(DSV4_V41_TOKENIZER_GZ ${PROJECT_SOURCE_DIR}/src/tokenizer/data/deepseek_v41_tokenizer.json.gz)
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/tokenizer/v41_tokenizer.cc PROPERTIES
  OBJECT_DEPENDS ${DSV4_V41_TOKENIZER_GZ}
  COMPILE_DEFINITIONS "DSV4_V41_TOKENIZER_GZ=\"${DSV4_V41_TOKENIZER_GZ}\"")
target_link_libraries(dsv4_tokenizer PUBLIC ZLIB::ZLIB)
