# train_toy under mpirun -np 2 against one process (run with -DTRAIN_TOY=<exe>
# -DMPIEXEC=<mpiexec> -DOUT=<dir>): the same final numbers up to the rounding
# of the all-reduce, rank 0 alone prints and writes (rank 1's --out stays
# absent when each rank is given its own --out).
file(REMOVE_RECURSE ${OUT})
set(args --seed 1 --steps 300 --dtype double)
execute_process(COMMAND ${TRAIN_TOY} ${args} --out ${OUT}/one
  RESULT_VARIABLE code OUTPUT_VARIABLE one_output ERROR_VARIABLE error)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "train_toy failed (${code}):\n${one_output}\n${error}")
endif()
# Every rank is given the same --out: rank 1 must not create or write it,
# so the directory holds exactly one set of files, and one copy of the output.
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${TRAIN_TOY} ${args} --out ${OUT}/two
  RESULT_VARIABLE code OUTPUT_VARIABLE two_output ERROR_VARIABLE error TIMEOUT 120)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "mpirun -np 2 train_toy failed (${code}):\n${two_output}\n${error}")
endif()
string(REGEX MATCHALL "final train MSE" printed "${two_output}")
list(LENGTH printed copies)
if(NOT copies EQUAL 1)
  message(FATAL_ERROR "expected one rank to print, saw ${copies} summaries:\n${two_output}")
endif()
# rank 1 writes nothing: a second, distinct --out per rank shows it.
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 bash -c
          "exec ${TRAIN_TOY} --seed 1 --steps 20 --dtype double --out ${OUT}/rank_$OMPI_COMM_WORLD_RANK"
  RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error TIMEOUT 120)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "mpirun -np 2 train_toy (per-rank --out) failed (${code}):\n${output}\n${error}")
endif()
if(NOT EXISTS ${OUT}/rank_0/summary.json)
  message(FATAL_ERROR "rank 0 wrote no summary.json")
endif()
if(EXISTS ${OUT}/rank_1)
  message(FATAL_ERROR "rank 1 wrote ${OUT}/rank_1")
endif()
# The same numbers: relative difference below 1e-9 in double (measured: a
# few 1e-14; the shards' means are summed in another order than one mean).
file(READ ${OUT}/one/summary.json a)
file(READ ${OUT}/two/summary.json b)
foreach(key final_train_mse heldout_mse_ffn heldout_mse_linear_baseline slice_max_abs_error)
  string(JSON x GET "${a}" ${key})
  string(JSON y GET "${b}" ${key})
  execute_process(COMMAND awk "BEGIN { d = (${x}) - (${y}); if (d < 0) d = -d; s = ${x}; if (s < 0) s = -s; print d / s; exit !(d <= 1e-9 * s) }"
    RESULT_VARIABLE close OUTPUT_VARIABLE relative)
  string(STRIP "${relative}" relative)
  message(STATUS "${key}: one process ${x}, two ${y}, relative difference ${relative}")
  if(NOT close EQUAL 0)
    message(FATAL_ERROR "${key}: one process ${x}, two processes ${y}")
  endif()
endforeach()
