# train_fashion under mpirun -np 2 against one process on a subset (run with
# -DTRAIN_FASHION=<exe> -DMPIEXEC=<mpiexec> -DOUT=<dir>): each rank trains on
# half of every batch of 128, dropout keyed by the global row, so the run
# ends where one process ends, to float rounding; rank 0 alone prints.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})
set(args --train-limit 1024 --test-limit 500 --epochs 2 --threads 1)
run_or_fail(one_output "train_fashion" 300 ${TRAIN_FASHION} ${args} --out ${OUT}/one)
run_or_fail(two_output "mpirun -np 2 train_fashion" 300
            ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${TRAIN_FASHION} ${args} --out ${OUT}/two)
expect_one_print("test accuracy [0-9.]+ after" "${two_output}")
# The same accuracy; losses within 1e-5 relative (measured: 5e-9).
file(READ ${OUT}/one/summary.json a)
file(READ ${OUT}/two/summary.json b)
string(JSON x GET "${a}" final_test_accuracy)
string(JSON y GET "${b}" final_test_accuracy)
if(NOT x STREQUAL y)
  message(FATAL_ERROR "test accuracy: one process ${x}, two ${y}")
endif()
foreach(key final_test_loss final_train_loss)
  expect_close("${a}" "${b}" ${key} 1e-5)
endforeach()
