# The toy experiment as a test (run with -DTRAIN_TOY=<exe> -DOUT=<dir>):
# trains with a fixed seed and the defaults, then reads summary.json.
# Bounds are loose on purpose: a correct engine lands far below them.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})

function(run_toy out_dir)
  execute_process(COMMAND ${TRAIN_TOY} --seed 1 --out ${out_dir} ${ARGN}
    RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "train_toy failed (${code}):\n${output}\n${error}")
  endif()
endfunction()

function(read_summary dir prefix)
  file(READ ${dir}/summary.json json)
  foreach(key final_train_mse heldout_mse_ffn heldout_mse_linear_baseline slice_max_abs_error)
    string(JSON value GET "${json}" ${key})
    set(${prefix}_${key} ${value} PARENT_SCOPE)
  endforeach()
endfunction()


run_toy(${OUT}/run --save ${OUT}/checkpoint)
read_summary(${OUT}/run a)
require_below(${a_heldout_mse_ffn} 1e-3 "held-out MSE of the FFN")
require_below(1e-2 ${a_heldout_mse_linear_baseline} "1e-2 vs the linear baseline's held-out MSE")
require_below(${a_slice_max_abs_error} 0.1 "slice error at x2 = 0")
foreach(name summary.json history.csv slice.csv loss.png slice.png)
  file(SIZE ${OUT}/run/${name} size)
  if(size EQUAL 0)
    message(FATAL_ERROR "${name} is empty")
  endif()
endforeach()

# Same seed, dtype and threads: bit-for-bit the same numbers.
run_toy(${OUT}/again)
read_summary(${OUT}/again b)
foreach(key final_train_mse heldout_mse_ffn heldout_mse_linear_baseline slice_max_abs_error)
  if(NOT a_${key} STREQUAL b_${key})
    message(FATAL_ERROR "not reproducible: ${key} ${a_${key}} then ${b_${key}}")
  endif()
endforeach()

# --load evaluates the saved FFN: the same held-out MSE without training.
run_toy(${OUT}/loaded --load ${OUT}/checkpoint)
read_summary(${OUT}/loaded c)
if(NOT a_heldout_mse_ffn STREQUAL c_heldout_mse_ffn)
  message(FATAL_ERROR "--load: held-out MSE ${c_heldout_mse_ffn}, trained model had ${a_heldout_mse_ffn}")
endif()

# A bad flag or value: one line on stderr and exit code 2.
foreach(bad "--steps;-3" "--steps;0" "--seed;-1" "--lr;-1" "--hidden;0" "--optimizer;rmsprop"
        "--activation;swish" "--dtype;half" "--nonsense")
  expect_refused("train_toy ${bad}" "" ${TRAIN_TOY} ${bad} --out ${OUT}/bad)
endforeach()
file(REMOVE_RECURSE ${OUT})
