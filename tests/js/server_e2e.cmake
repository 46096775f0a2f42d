# End-to-end tests of `dsv4 serve` with the official `openai` npm client and autocannon
# (tests/js/e2e/*.test.mjs, one CTest test per file). They need node and tests/js/node_modules
# (scripts/deps.sh); without node they fail rather than skip.
file(GLOB e2e_js CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/e2e/*.test.mjs)
find_program(DSV4_NODE node)
foreach(js ${e2e_js})
  get_filename_component(js_name ${js} NAME_WE)
  if(DSV4_NODE)
    add_test(NAME e2e_${js_name} COMMAND ${DSV4_NODE} --test ${js}
             WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
    set_tests_properties(e2e_${js_name} PROPERTIES ENVIRONMENT "DSV4_BIN=$<TARGET_FILE:dsv4>"
                         TIMEOUT 300)
  else()
    add_test(NAME e2e_${js_name}
             COMMAND sh -c "echo 'node was not found: install it (scripts/deps.sh)' >&2; exit 1")
  endif()
endforeach()
