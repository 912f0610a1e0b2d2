# train_fashion under mpirun -np 2 against one process on a subset (run with
# -DTRAIN_FASHION=<exe> -DMPIEXEC=<mpiexec> -DOUT=<dir>): each rank trains on
# half of every batch of 128, dropout keyed by the global row, so the run
# ends where one process ends, to float rounding; rank 0 alone prints.
file(REMOVE_RECURSE ${OUT})
set(args --train-limit 1024 --test-limit 500 --epochs 2 --threads 1)
execute_process(COMMAND ${TRAIN_FASHION} ${args} --out ${OUT}/one
  RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "train_fashion failed (${code}):\n${output}\n${error}")
endif()
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${TRAIN_FASHION} ${args} --out ${OUT}/two
  RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error TIMEOUT 300)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "mpirun -np 2 train_fashion failed (${code}):\n${output}\n${error}")
endif()
string(REGEX MATCHALL "test accuracy [0-9.]+ after" printed "${output}")
list(LENGTH printed copies)
if(NOT copies EQUAL 1)
  message(FATAL_ERROR "expected one rank to print, saw ${copies} summaries:\n${output}")
endif()
# The same accuracy; losses within 1e-5 relative (measured: 5e-9).
file(READ ${OUT}/one/summary.json a)
file(READ ${OUT}/two/summary.json b)
string(JSON x GET "${a}" final_test_accuracy)
string(JSON y GET "${b}" final_test_accuracy)
if(NOT x STREQUAL y)
  message(FATAL_ERROR "test accuracy: one process ${x}, two ${y}")
endif()
foreach(key final_test_loss final_train_loss)
  string(JSON x GET "${a}" ${key})
  string(JSON y GET "${b}" ${key})
  execute_process(COMMAND awk "BEGIN { d = (${x}) - (${y}); if (d < 0) d = -d; print d / ${x}; exit !(d <= 1e-5 * ${x}) }"
    RESULT_VARIABLE close OUTPUT_VARIABLE relative)
  string(STRIP "${relative}" relative)
  message(STATUS "${key}: one process ${x}, two ${y}, relative difference ${relative}")
  if(NOT close EQUAL 0)
    message(FATAL_ERROR "${key}: one process ${x}, two processes ${y}")
  endif()
endforeach()
