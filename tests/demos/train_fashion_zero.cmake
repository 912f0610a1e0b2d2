# train_fashion with --zero 1 and 2 under mpirun -np 2 on a subset (run with
# -DTRAIN_FASHION=<exe> -DMPIEXEC=<mpiexec> -DOUT=<dir>): AdamW's state (and
# at stage 2 the gradients) sharded, the run ends where one process ends,
# to float rounding (the tolerance of train_fashion_mpi.cmake). --save writes
# the consolidated state (the arrays of a one-process save), and a run
# stopped after epoch 1 and resumed with the same --zero equals the straight
# run bit for bit: summary, history, parameters and optimizer state. In one
# process --zero 1 is the plain optimizer: the same numbers, exactly.
include(${CMAKE_CURRENT_LIST_DIR}/mpi_compare.cmake)
file(REMOVE_RECURSE ${OUT})
set(args --train-limit 1024 --test-limit 500 --epochs 2 --threads 1)
set(mpirun ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2)
set(numbers final_test_accuracy final_test_loss final_train_loss steps)
run_or_fail(output "train_fashion" 120 ${TRAIN_FASHION} ${args} --out ${OUT}/one
            --save ${OUT}/one_saved)
run_or_fail(output "train_fashion --zero 1" 120 ${TRAIN_FASHION} ${args} --zero 1
            --out ${OUT}/one_zero)
file(READ ${OUT}/one/summary.json one)
file(READ ${OUT}/one_zero/summary.json one_zero)
expect_same_json("${one}" "${one_zero}" ${numbers})
file(GLOB one_arrays RELATIVE ${OUT}/one_saved ${OUT}/one_saved/*.npy)

foreach(stage 1 2)
  set(z ${OUT}/zero${stage})
  run_or_fail(output "mpirun -np 2 train_fashion --zero ${stage}" 120
              ${mpirun} ${TRAIN_FASHION} ${args} --zero ${stage} --out ${z}/straight
              --save ${z}/saved)
  expect_one_print("ZeRO stage ${stage}" "${output}")
  file(READ ${z}/straight/summary.json two)
  expect_same_json("${one}" "${two}" final_test_accuracy)
  foreach(key final_test_loss final_train_loss)
    expect_close("${one}" "${two}" ${key} 1e-5)
  endforeach()
  file(GLOB arrays RELATIVE ${z}/saved ${z}/saved/*.npy)
  if(NOT arrays STREQUAL one_arrays)
    message(FATAL_ERROR "--zero ${stage} saved ${arrays}\none process saves ${one_arrays}")
  endif()
  run_or_fail(output "mpirun -np 2 train_fashion --zero ${stage} --stop-after 1" 120
              ${mpirun} ${TRAIN_FASHION} ${args} --zero ${stage} --out ${z}/first --stop-after 1
              --save ${z}/resumed_saved)
  run_or_fail(output "mpirun -np 2 train_fashion --zero ${stage} --resume" 120
              ${mpirun} ${TRAIN_FASHION} ${args} --zero ${stage} --out ${z}/resumed
              --resume ${z}/resumed_saved --save ${z}/resumed_saved)
  file(READ ${z}/resumed/summary.json resumed)
  expect_same_json("${two}" "${resumed}" ${numbers})
  expect_same_history(${z}/straight/history.csv ${z}/resumed/history.csv)
  expect_same_arrays(${z}/saved ${z}/resumed_saved 6)
endforeach()
