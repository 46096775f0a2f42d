# Tokenizer parity with @huggingface/tokenizers (node): the driver encodes the corpus the node
# script generates. Without node (or tests/js/node_modules) the test fails rather than passing.
add_executable(tokenizer_parity_driver ${CMAKE_CURRENT_LIST_DIR}/tokenizer_parity_driver.cc)
target_link_libraries(tokenizer_parity_driver PRIVATE dsv4_tokenizer CLI11::CLI11)
find_program(DSV4_NODE node)
if(DSV4_NODE)
  add_test(NAME tokenizer_js_parity
           COMMAND ${DSV4_NODE} ${CMAKE_CURRENT_LIST_DIR}/tokenizer_parity.mjs
                   --driver $<TARGET_FILE:tokenizer_parity_driver> --dsv4 $<TARGET_FILE:dsv4>
           WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
else()
  add_test(NAME tokenizer_js_parity COMMAND sh -c "echo 'node not found: install it (scripts/deps.sh)' >&2; exit 1")
endif()
