# What the scripts that run the demos share (included by each of them): runs
# that must succeed or be refused, the numbers a run must repeat, and the
# comparisons of a run under mpirun against one process.

# Runs the command given after `timeout`, stopped after `timeout` seconds so
# that a hang fails, and sets out_var to its standard output; fails, naming
# `label`, unless it exits 0.
function(run_or_fail out_var label timeout)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE output
                  ERROR_VARIABLE error TIMEOUT ${timeout})
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${label} failed (${code}):\n${output}\n${error}")
  endif()
  set(${out_var} "${output}" PARENT_SCOPE)
endfunction()

# Fails unless `pattern` occurs exactly once in `output`: one rank printed.
function(expect_one_print pattern output)
  string(REGEX MATCHALL "${pattern}" printed "${output}")
  list(LENGTH printed copies)
  if(NOT copies EQUAL 1)
    message(FATAL_ERROR "expected one rank to print, saw ${copies} summaries:\n${output}")
  endif()
endfunction()

# Fails unless the number `key` of the JSON texts `one` (one process) and
# `two` (two ranks) differ by at most `tolerance` relative to |one|.
function(expect_close one two key tolerance)
  string(JSON x GET "${one}" ${key})
  string(JSON y GET "${two}" ${key})
  execute_process(
    COMMAND awk "BEGIN { d = (${x}) - (${y}); if (d < 0) d = -d; s = ${x}; if (s < 0) s = -s; print d / s; exit !(d <= ${tolerance} * s) }"
    RESULT_VARIABLE close OUTPUT_VARIABLE relative)
  string(STRIP "${relative}" relative)
  message(STATUS "${key}: one process ${x}, two ${y}, relative difference ${relative}")
  if(NOT close EQUAL 0)
    message(FATAL_ERROR "${key}: one process ${x}, two processes ${y}")
  endif()
endfunction()

# expect_close for each key after `tolerance` of the summary.json files of
# the runs in the directories `one` and `two`.
function(expect_close_runs one two tolerance)
  file(READ ${one}/summary.json a)
  file(READ ${two}/summary.json b)
  foreach(key ${ARGN})
    expect_close("${a}" "${b}" ${key} ${tolerance})
  endforeach()
endfunction()

# Fails unless the JSON texts `a` and `b` hold the same text for every key
# given after them (bit for bit, as printed).
function(expect_same_json a b)
  foreach(key ${ARGN})
    string(JSON x GET "${a}" ${key})
    string(JSON y GET "${b}" ${key})
    if(NOT x STREQUAL y)
      message(FATAL_ERROR "${key}: ${x} and ${y} differ")
    endif()
  endforeach()
endfunction()

# Fails unless the CSV files `a` and `b` have the same rows once their last
# column (the seconds, which never repeat) is dropped.
function(expect_same_history a b)
  foreach(file a b)
    file(STRINGS ${${file}} lines)
    set(rows_${file} "")
    foreach(line ${lines})
      string(REGEX REPLACE ",[^,]*$" "" line "${line}")
      list(APPEND rows_${file} "${line}")
    endforeach()
  endforeach()
  if(NOT rows_a STREQUAL rows_b)
    message(FATAL_ERROR "${a} and ${b} differ:\n${rows_a}\nthen\n${rows_b}")
  endif()
endfunction()

# Fails unless the training-state directories `a` and `b` hold the same
# arrays (names, and bytes by SHA-256) and at least `min_count` of them.
function(expect_same_arrays a b min_count)
  file(GLOB names_a RELATIVE ${a} ${a}/*.npy)
  file(GLOB names_b RELATIVE ${b} ${b}/*.npy)
  list(LENGTH names_a n)
  if(n LESS min_count OR NOT names_a STREQUAL names_b)
    message(FATAL_ERROR "arrays of ${a}: ${names_a}\nof ${b}: ${names_b}")
  endif()
  foreach(name ${names_a})
    file(SHA256 ${a}/${name} x)
    file(SHA256 ${b}/${name} y)
    if(NOT x STREQUAL y)
      message(FATAL_ERROR "${name} differs between ${a} and ${b}")
    endif()
  endforeach()
endfunction()

# Fails unless `value` < `bound` (awk compares the decimals CMake cannot).
function(require_below value bound what)
  execute_process(COMMAND awk "BEGIN { exit !(${value} < ${bound}) }" RESULT_VARIABLE below)
  if(NOT below EQUAL 0)
    message(FATAL_ERROR "${what} = ${value}, expected below ${bound}")
  endif()
endfunction()

# Fails unless every text given after `output` occurs in it.
function(require_output output)
  foreach(part ${ARGN})
    string(FIND "${output}" "${part}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the output lacks '${part}':\n${output}")
    endif()
  endforeach()
endfunction()

# Fails unless the message `text` holds `part`.
function(require_in text part label)
  string(FIND "${text}" "${part}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${label}: the message '${text}' lacks '${part}'")
  endif()
endfunction()

# Runs the command given after `part` (stopped after 240 s) and fails unless
# it exits 2 with one line on standard error holding `part` (any line when
# `part` is empty); sets `error` to that line.
function(expect_refused label part)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE output
                  ERROR_VARIABLE error TIMEOUT 240)
  string(STRIP "${error}" error)
  string(FIND "${error}" "\n" newline)
  string(FIND "${error}" "${part}" at)
  if(NOT code EQUAL 2 OR NOT newline EQUAL -1 OR error STREQUAL "" OR at EQUAL -1)
    message(FATAL_ERROR "${label}: exit ${code}, stderr '${error}' (expected one line with "
                        "'${part}', exit 2)")
  endif()
  set(error "${error}" PARENT_SCOPE)
endfunction()

# Sets `var` to the numbers of the run in `dir` that must repeat: the
# summary.json values of the KEYS, history.csv without its last column (the
# seconds) and the lines of the CSV FILES.
function(read_numbers dir var)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "KEYS;FILES")
  file(READ ${dir}/summary.json json)
  set(numbers "")
  foreach(key ${arg_KEYS})
    string(JSON value GET "${json}" ${key})
    list(APPEND numbers "${key}=${value}")
  endforeach()
  file(STRINGS ${dir}/history.csv lines)
  foreach(line ${lines})
    string(REGEX REPLACE ",[^,]*$" "" line "${line}")
    list(APPEND numbers "${line}")
  endforeach()
  foreach(csv ${arg_FILES})
    file(STRINGS ${dir}/${csv} lines)
    list(APPEND numbers ${lines})
  endforeach()
  set(${var} "${numbers}" PARENT_SCOPE)
endfunction()

# Fails unless the runs in `a` and `b` have the same read_numbers (the
# arguments after `b`).
function(expect_same_numbers a b)
  read_numbers(${a} x ${ARGN})
  read_numbers(${b} y ${ARGN})
  if(NOT x STREQUAL y)
    message(FATAL_ERROR "${a} and ${b} differ:\n${x}\nthen\n${y}")
  endif()
endfunction()

# Fails unless `file` starts as a PNG picture does (with OPTIONAL: only when
# gnuplot is installed).
function(expect_png file)
  find_program(GNUPLOT gnuplot)
  if(GNUPLOT OR NOT "${ARGN}" STREQUAL "OPTIONAL")
    file(READ ${file} magic LIMIT 8 HEX)
    if(NOT magic STREQUAL "89504e470d0a1a0a")
      message(FATAL_ERROR "${file} is not a PNG file")
    endif()
  endif()
endfunction()
