# train_gpt with --zero 1 and 2 under mpirun -np 2 (run with -DTRAIN_GPT=<exe>
# -DMPIEXEC=<mpiexec> -DOUT=<dir> -DDATA=<dir of the fortune files>): the
# optimizer's state (and at stage 2 the gradients) sharded, the gradient
# norm clipped over both shards, the run ends where one process ends, to
# float rounding (the tolerance of train_gpt_mpi.cmake). --save writes the
# consolidated state (the arrays of a one-process save), and a run stopped
# after step 30 and resumed with the same --zero equals the straight run bit
# for bit: summary, history, parameters and optimizer state. In one process
# --zero 2 is the plain optimizer: the same numbers, exactly.
include(${CMAKE_CURRENT_LIST_DIR}/mpi_compare.cmake)
file(REMOVE_RECURSE ${OUT})
set(args --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --dropout 0.1 --batch-size 8 --steps 40
    --eval-interval 20 --eval-windows 16 --sample-chars 20 --lr 1e-2 --warmup-steps 5
    --grad-clip 0.5 --threads 1 --seed 5 --data-dir ${DATA})
set(mpirun ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2)
set(numbers final_train_loss final_val_loss step)
run_or_fail(output "train_gpt" 120 ${TRAIN_GPT} ${args} --out ${OUT}/one --save ${OUT}/one_saved)
run_or_fail(output "train_gpt --zero 2" 120 ${TRAIN_GPT} ${args} --zero 2 --out ${OUT}/one_zero)
file(READ ${OUT}/one/summary.json one)
file(READ ${OUT}/one_zero/summary.json one_zero)
expect_same_json("${one}" "${one_zero}" ${numbers})
file(GLOB one_arrays RELATIVE ${OUT}/one_saved ${OUT}/one_saved/*.npy)

foreach(stage 1 2)
  set(z ${OUT}/zero${stage})
  run_or_fail(output "mpirun -np 2 train_gpt --zero ${stage}" 120
              ${mpirun} ${TRAIN_GPT} ${args} --zero ${stage} --out ${z}/straight --save ${z}/saved)
  expect_one_print("ZeRO stage ${stage}" "${output}")
  file(READ ${z}/straight/summary.json two)
  foreach(key final_train_loss final_val_loss)
    expect_close("${one}" "${two}" ${key} 1e-4)
  endforeach()
  file(GLOB arrays RELATIVE ${z}/saved ${z}/saved/*.npy)
  if(NOT arrays STREQUAL one_arrays)
    message(FATAL_ERROR "--zero ${stage} saved ${arrays}\none process saves ${one_arrays}")
  endif()
  run_or_fail(output "mpirun -np 2 train_gpt --zero ${stage} --stop-after 30" 120
              ${mpirun} ${TRAIN_GPT} ${args} --zero ${stage} --out ${z}/first --stop-after 30
              --save ${z}/resumed_saved)
  run_or_fail(output "mpirun -np 2 train_gpt --zero ${stage} --resume" 120
              ${mpirun} ${TRAIN_GPT} ${args} --zero ${stage} --out ${z}/resumed
              --resume ${z}/resumed_saved --save ${z}/resumed_saved)
  file(READ ${z}/resumed/summary.json resumed)
  expect_same_json("${two}" "${resumed}" ${numbers})
  expect_same_history(${z}/straight/history.csv ${z}/resumed/history.csv)
  expect_same_arrays(${z}/saved ${z}/resumed_saved 10)
endforeach()
