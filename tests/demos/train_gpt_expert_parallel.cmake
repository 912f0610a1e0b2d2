# train_gpt --expert-parallel under mpirun -np 2 against one process with a
# tiny mixture of experts (run with -DTRAIN_GPT=<exe> -DMPIEXEC=<mpiexec>
# -DOUT=<dir> -DDATA=<dir of the fortune files>): each rank holds 2 of each
# layer's 4 experts and half of every batch, the tokens exchanged by
# all-to-all, so the run ends where one process ends, to float rounding,
# with --zero 0 and --zero 1; --save writes one state per rank.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})
set(args --n-layer 2 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --steps 8
    --eval-interval 4 --eval-windows 4 --sample-chars 8 --lr 1e-2 --warmup-steps 2 --threads 1
    --seed 3 --experts 4 --experts-per-token 2 --expert-hidden 8 --data-dir ${DATA})
run_or_fail(one_output "train_gpt" 120 ${TRAIN_GPT} ${args} --out ${OUT}/one)
run_or_fail(two_output "mpirun -np 2 train_gpt --expert-parallel" 120
            ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${TRAIN_GPT} ${args}
            --expert-parallel --out ${OUT}/two --save ${OUT}/saved)
expect_one_print("experts sharded, 2 of each layer's 4 per process" "${two_output}")
# Losses within 1e-4 relative, as train_gpt_mpi.cmake (measured: 1e-8).
expect_close_runs(${OUT}/one ${OUT}/two 1e-4 final_train_loss final_val_loss)
# The routing counts of the global batch, the same on every rank, exactly.
file(READ ${OUT}/one/summary.json a)
file(READ ${OUT}/two/summary.json b)
expect_same_json("${a}" "${b}" tokens_per_expert)
# With --zero 1 the shared parameters' AdamW state is sharded and each rank
# steps its own experts; the clipped gradient norm covers every expert once.
run_or_fail(zero_output "mpirun -np 2 train_gpt --expert-parallel --zero 1" 120
            ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${TRAIN_GPT} ${args}
            --expert-parallel --zero 1 --out ${OUT}/zero --save ${OUT}/zero_saved)
expect_close_runs(${OUT}/one ${OUT}/zero 1e-4 final_train_loss final_val_loss)
foreach(rank 0 1)
  foreach(dir saved zero_saved)
    if(NOT EXISTS ${OUT}/${dir}/rank${rank}/manifest.tsv)
      message(FATAL_ERROR "--save wrote no state of rank ${rank} in ${dir}")
    endif()
  endforeach()
endforeach()
