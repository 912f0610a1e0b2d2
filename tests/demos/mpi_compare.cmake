# What the scripts that run a demo under mpirun against one process share
# (included by train_toy_mpi.cmake and train_fashion_mpi.cmake).

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
