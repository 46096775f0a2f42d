# `dsv4 run` on a synthesized V4-Flash-0731 checkpoint: `dsv4 synth --preset tiny --variant v4-0731`
# writes it into a fresh folder, `dsv4 run --model DIR --ids ... --max-tokens 8` prints 8 ids inside
# the config's vocabulary, and `--force` with `--dump-logits` writes an fp32 [rows, vocab] .npy with
# one row per prompt and forced position. Expected values come from the command line (8 tokens, 4 +
# 3 rows), the written config.json (vocab_size) and the NumPy format spec (NEP 1: magic
# "\x93NUMPY", version 1.0, little-endian u16 header length, a dict header, C-order data).
#
# Included by tests/CMakeLists.txt it registers the test; run with `cmake -P` it is the test.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME v4_0731_cli
           COMMAND ${CMAKE_COMMAND} -DDSV4_BIN=$<TARGET_FILE:dsv4>
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/v4_0731_cli -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(v4_0731_cli PROPERTIES TIMEOUT 180)
  return()
endif()

# check(<condition...> MESSAGE <text>): fails the test with <text> unless the condition holds.
function(check)
  cmake_parse_arguments(PARSE_ARGV 0 c "" "" "MESSAGE")
  if(NOT (${c_UNPARSED_ARGUMENTS}))
    message(FATAL_ERROR "v4_0731_cli: ${c_MESSAGE}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(model "${WORK}/model")
execute_process(COMMAND "${DSV4_BIN}" synth --preset tiny --variant v4-0731 --no-sync --out "${model}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check(rc EQUAL 0 MESSAGE "synth exited ${rc}: ${err}")
file(READ "${model}/config.json" config)
string(JSON vocab GET "${config}" vocab_size)
check(vocab GREATER 0 MESSAGE "config.json vocab_size is ${vocab}")

# Generation: exactly 8 ids, each inside the vocabulary.
execute_process(COMMAND "${DSV4_BIN}" run --model "${model}" --ids 0,4,8,15 --max-tokens 8 --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check(rc EQUAL 0 MESSAGE "run exited ${rc}: ${err}")
string(REGEX MATCH "ids: ([0-9,]*)" line "${out}")
check(line MESSAGE "no 'ids:' line in: ${out}")
string(REPLACE "," ";" ids "${CMAKE_MATCH_1}")
list(LENGTH ids n)
check(n EQUAL 8 MESSAGE "run printed ${n} ids, not 8: ${out}")
foreach(id IN LISTS ids)
  check(id LESS vocab MESSAGE "id ${id} outside the vocabulary of ${vocab}")
endforeach()

# Scoring a forced continuation: 4 prompt + 3 forced rows of fp32 logits.
set(npy "${WORK}/logits.npy")
execute_process(COMMAND "${DSV4_BIN}" run --model "${model}" --ids 0,4,8,15 --force 16,23,42
                        --dump-logits "${npy}" --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check(rc EQUAL 0 MESSAGE "run --force exited ${rc}: ${err}")
check(out MATCHES "ids: 16,23,42" MESSAGE "run --force printed '${out}', not the forced ids")
file(READ "${npy}" magic LIMIT 8 HEX)
check(magic STREQUAL "934e554d50590100" MESSAGE "not a NumPy 1.0 file: ${magic}")
file(READ "${npy}" len_hex OFFSET 8 LIMIT 2 HEX)
string(SUBSTRING "${len_hex}" 0 2 lo)
string(SUBSTRING "${len_hex}" 2 2 hi)
math(EXPR header_len "0x${hi}${lo}")
file(READ "${npy}" header OFFSET 10 LIMIT ${header_len})
check(header MATCHES "'descr': *'<f4'" MESSAGE "dtype is not little-endian fp32: ${header}")
check(header MATCHES "'fortran_order': *False" MESSAGE "not C order: ${header}")
string(REGEX MATCH "'shape': *\\(([0-9]+), *([0-9]+)\\)" shape "${header}")
check(shape MESSAGE "no 2-d shape in: ${header}")
check(CMAKE_MATCH_1 EQUAL 7 MESSAGE "${CMAKE_MATCH_1} rows, not 7 (4 prompt + 3 forced)")
check(CMAKE_MATCH_2 EQUAL vocab MESSAGE "${CMAKE_MATCH_2} columns, not the vocab ${vocab}")
file(SIZE "${npy}" size)
math(EXPR want "10 + ${header_len} + 7 * ${vocab} * 4")
check(size EQUAL want MESSAGE "file holds ${size} bytes, not ${want}")
file(REMOVE_RECURSE "${WORK}")
message(STATUS "v4_0731_cli: 8 generated ids; logits [7, ${vocab}] fp32")
