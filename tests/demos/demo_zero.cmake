# A demo with --zero 1 and 2 under mpirun -np 2 (run with -DDEMO=train_fashion
# or train_gpt -DEXE=<the demo> -DMPIEXEC=<mpiexec> -DOUT=<dir>, and for
# train_gpt -DDATA=<dir of the fortune files>): the optimizer's state (and at
# stage 2 the gradients) sharded (train_gpt: the gradient norm clipped over
# both shards), the run ends where one process ends, to float rounding (the
# tolerance of the demo's _mpi.cmake). --save writes the consolidated state
# (the arrays of a one-process save), and a run stopped part-way and resumed
# with the same --zero equals the straight run bit for bit: summary,
# history, parameters and optimizer state. In one process --zero is the
# plain optimizer: the same numbers, exactly.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
# Per demo: its arguments (a small run), the summary's numbers a resumed run
# repeats exactly, the --zero stage of the one-process run, the numbers equal
# and close (within `tolerance`) under mpirun, where to stop and resume, and
# the least number of arrays a saved state holds.
if(DEMO STREQUAL "train_fashion")
  set(args --train-limit 1024 --test-limit 500 --epochs 2 --threads 1)
  set(numbers final_test_accuracy final_test_loss final_train_loss steps)
  set(one_process_stage 1)
  set(equal final_test_accuracy)
  set(close final_test_loss final_train_loss)
  set(tolerance 1e-5)
  set(stop_after 1)
  set(min_arrays 6)
elseif(DEMO STREQUAL "train_gpt")
  set(args --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --dropout 0.1 --batch-size 8
      --steps 40 --eval-interval 20 --eval-windows 16 --sample-chars 20 --lr 1e-2
      --warmup-steps 5 --grad-clip 0.5 --threads 1 --seed 5 --data-dir ${DATA})
  set(numbers final_train_loss final_val_loss step)
  set(one_process_stage 2)
  set(equal)
  set(close final_train_loss final_val_loss)
  set(tolerance 1e-4)
  set(stop_after 30)
  set(min_arrays 10)
else()
  message(FATAL_ERROR "demo_zero.cmake: -DDEMO=train_fashion or train_gpt, not '${DEMO}'")
endif()

file(REMOVE_RECURSE ${OUT})
set(mpirun ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2)
run_or_fail(output "${DEMO}" 120 ${EXE} ${args} --out ${OUT}/one --save ${OUT}/one_saved)
run_or_fail(output "${DEMO} --zero ${one_process_stage}" 120 ${EXE} ${args}
            --zero ${one_process_stage} --out ${OUT}/one_zero)
file(READ ${OUT}/one/summary.json one)
file(READ ${OUT}/one_zero/summary.json one_zero)
expect_same_json("${one}" "${one_zero}" ${numbers})
file(GLOB one_arrays RELATIVE ${OUT}/one_saved ${OUT}/one_saved/*.npy)

foreach(stage 1 2)
  set(z ${OUT}/zero${stage})
  run_or_fail(output "mpirun -np 2 ${DEMO} --zero ${stage}" 120
              ${mpirun} ${EXE} ${args} --zero ${stage} --out ${z}/straight --save ${z}/saved)
  expect_one_print("ZeRO stage ${stage}" "${output}")
  file(READ ${z}/straight/summary.json two)
  if(equal)
    expect_same_json("${one}" "${two}" ${equal})
  endif()
  foreach(key ${close})
    expect_close("${one}" "${two}" ${key} ${tolerance})
  endforeach()
  file(GLOB arrays RELATIVE ${z}/saved ${z}/saved/*.npy)
  if(NOT arrays STREQUAL one_arrays)
    message(FATAL_ERROR "--zero ${stage} saved ${arrays}\none process saves ${one_arrays}")
  endif()
  run_or_fail(output "mpirun -np 2 ${DEMO} --zero ${stage} --stop-after ${stop_after}" 120
              ${mpirun} ${EXE} ${args} --zero ${stage} --out ${z}/first
              --stop-after ${stop_after} --save ${z}/resumed_saved)
  run_or_fail(output "mpirun -np 2 ${DEMO} --zero ${stage} --resume" 120
              ${mpirun} ${EXE} ${args} --zero ${stage} --out ${z}/resumed
              --resume ${z}/resumed_saved --save ${z}/resumed_saved)
  file(READ ${z}/resumed/summary.json resumed)
  expect_same_json("${two}" "${resumed}" ${numbers})
  expect_same_history(${z}/straight/history.csv ${z}/resumed/history.csv)
  expect_same_arrays(${z}/saved ${z}/resumed_saved ${min_arrays})
endforeach()
