# What the scripts that run a demo under mpirun against one process share
# (included by the *_mpi.cmake scripts and demo_zero.cmake).

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
