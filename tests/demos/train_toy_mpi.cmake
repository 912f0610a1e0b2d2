# train_toy under mpirun -np 2 against one process (run with -DTRAIN_TOY=<exe>
# -DMPIEXEC=<mpiexec> -DOUT=<dir>): the same final numbers up to the rounding
# of the all-reduce, rank 0 alone prints and writes (rank 1's --out stays
# absent when each rank is given its own --out); so do --zero 1 and 2 (the
# two optimizers sharded).
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})
set(args --seed 1 --steps 300 --dtype double)
set(mpirun ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2)
run_or_fail(one_output "train_toy" 120 ${TRAIN_TOY} ${args} --out ${OUT}/one)
# Every rank is given the same --out: rank 1 must not create or write it,
# so the directory holds exactly one set of files, and one copy of the output.
run_or_fail(two_output "mpirun -np 2 train_toy" 120 ${mpirun} ${TRAIN_TOY} ${args} --out ${OUT}/two)
expect_one_print("final train MSE" "${two_output}")
# rank 1 writes nothing: a second, distinct --out per rank shows it.
run_or_fail(output "mpirun -np 2 train_toy (per-rank --out)" 120 ${mpirun} bash -c
            "exec ${TRAIN_TOY} --seed 1 --steps 20 --dtype double --out ${OUT}/rank_$OMPI_COMM_WORLD_RANK")
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
  expect_close("${a}" "${b}" ${key} 1e-9)
endforeach()
foreach(stage 1 2)
  run_or_fail(output "mpirun -np 2 train_toy --zero ${stage}" 120
              ${mpirun} ${TRAIN_TOY} ${args} --zero ${stage} --out ${OUT}/zero${stage})
  file(READ ${OUT}/zero${stage}/summary.json b)
  foreach(key final_train_mse heldout_mse_ffn heldout_mse_linear_baseline slice_max_abs_error)
    expect_close("${a}" "${b}" ${key} 1e-9)
  endforeach()
endforeach()
