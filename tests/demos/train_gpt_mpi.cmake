# train_gpt under mpirun -np 2 against one process with a tiny model (run with
# -DTRAIN_GPT=<exe> -DMPIEXEC=<mpiexec> -DOUT=<dir> -DDATA=<dir of the fortune
# files>): each rank builds its half of every batch of windows (the windows are
# keyed by the global row, and so are the dropout masks) and the gradients are averaged, so the run ends where
# one process ends, to float rounding; rank 0 alone prints and writes.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})
set(args --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --dropout 0.1 --batch-size 8 --steps 40
    --eval-interval 20 --eval-windows 16 --sample-chars 20 --lr 1e-2 --warmup-steps 5
    --threads 1 --seed 5 --data-dir ${DATA})
run_or_fail(one_output "train_gpt" 60 ${TRAIN_GPT} ${args} --out ${OUT}/one)
run_or_fail(two_output "mpirun -np 2 train_gpt" 60
            ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${TRAIN_GPT} ${args} --out ${OUT}/two)
expect_one_print("validation loss [0-9.]+ nats per character" "${two_output}")
expect_one_print("2 processes, 4 windows of each batch of 8 per process" "${two_output}")
# Losses within 1e-4 relative (measured: see the test's output).
file(READ ${OUT}/one/summary.json a)
file(READ ${OUT}/two/summary.json b)
foreach(key final_train_loss final_val_loss)
  expect_close("${a}" "${b}" ${key} 1e-4)
endforeach()
string(JSON x GET "${a}" unigram_baseline)
string(JSON y GET "${b}" unigram_baseline)
string(JSON p GET "${b}" processes)
if(NOT x STREQUAL y OR NOT p EQUAL 2)
  message(FATAL_ERROR "unigram baseline: one process ${x}, two ${y}; processes ${p}")
endif()
