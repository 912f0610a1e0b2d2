# train_gpt --experts with a tiny model (run with -DTRAIN_GPT=<exe> -DOUT=<dir>
# -DDATA=<dir of the fortune files>): a run of sparse mixture-of-experts
# layers reports its routing (the progress line, summary.json's
# tokens_per_expert, experts.csv, experts.png), counts every choice (k per
# token), resumes bit for bit from a stop between two evaluations (the
# routing counts of the open interval included), generates from its save,
# and refuses bad expert options with one line and exit code 2.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})
set(base --n-layer 2 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --steps 12
    --eval-interval 4 --eval-windows 4 --sample-chars 8 --lr 1e-2 --warmup-steps 2 --threads 2
    --seed 3 --expert-hidden 8 --aux-loss-coef 0.02 --data-dir ${DATA})
set(tiny ${base} --experts 4 --experts-per-token 2)

set(numbers KEYS final_train_loss final_val_loss step tokens_per_expert FILES experts.csv)

run_or_fail(output train_gpt 240 ${TRAIN_GPT} ${tiny} --out ${OUT}/run --save ${OUT}/saved)
require_output("${output}" "mixture of 4 experts of 8 channels, 2 per token" "experts: layer 0"
               "| layer 1" "val loss")
file(READ ${OUT}/run/summary.json json)
string(JSON experts GET "${json}" model experts)
string(JSON parameters GET "${json}" model parameters)
string(JSON active GET "${json}" model active_parameters)
string(JSON layers LENGTH "${json}" tokens_per_expert)
# 2 of 4 experts of 3 [8, 16] matrices idle per layer: 2 * 2 * 384 parameters.
math(EXPR idle "${parameters} - ${active}")
if(NOT experts EQUAL 4 OR NOT idle EQUAL 1536 OR NOT layers EQUAL 2)
  message(FATAL_ERROR "summary.json: experts ${experts}, ${parameters} parameters of which "
                      "${active} active, ${layers} layers of tokens per expert")
endif()
# Each record counts 4 steps of 4 windows of 16 tokens, 2 choices each, in every layer.
file(STRINGS ${OUT}/run/experts.csv rows)
list(LENGTH rows n)
list(GET rows 0 header)
if(NOT n EQUAL 4 OR NOT header MATCHES "^step,layer0_expert0,.*,layer1_expert3$")
  message(FATAL_ERROR "experts.csv: ${n} lines, header '${header}'")
endif()
list(GET rows 3 last)
string(REPLACE "," ";" last "${last}")
list(GET last 0 step)
set(layer0 0)
set(layer1 0)
foreach(column 1 2 3 4)
  list(GET last ${column} a)
  math(EXPR layer0 "${layer0} + ${a}")
  math(EXPR column "${column} + 4")
  list(GET last ${column} b)
  math(EXPR layer1 "${layer1} + ${b}")
endforeach()
if(NOT step EQUAL 12 OR NOT layer0 EQUAL 512 OR NOT layer1 EQUAL 512)
  message(FATAL_ERROR "experts.csv at step ${step}: ${layer0} and ${layer1} choices, expected 512")
endif()
expect_png(${OUT}/run/experts.png OPTIONAL)

# Stopped after step 6 (between two evaluations), resumed: the straight run's numbers.
run_or_fail(output train_gpt 240 ${TRAIN_GPT} ${tiny} --out ${OUT}/first --stop-after 6
            --save ${OUT}/saved_resumed)
run_or_fail(output train_gpt 240 ${TRAIN_GPT} ${tiny} --out ${OUT}/resumed
            --resume ${OUT}/saved_resumed --save ${OUT}/saved_resumed)
expect_same_numbers(${OUT}/run ${OUT}/resumed ${numbers})
expect_same_arrays(${OUT}/saved ${OUT}/saved_resumed 10)

# --generate rebuilds the sparse model from the saved run.
run_or_fail(text "train_gpt --generate" 240 ${TRAIN_GPT} --generate ${OUT}/saved --prompt "The "
            --max-new-chars 40 --seed 7)
string(FIND "${text}" "The " at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "--generate:\n${text}")
endif()

expect_refused("--experts 1" "--experts 1" ${TRAIN_GPT} ${base} --experts 1 --out ${OUT}/bad)
expect_refused("k > E" "--experts-per-token 5 is not in 1 .. --experts 4" ${TRAIN_GPT} ${base}
               --experts 4 --experts-per-token 5 --out ${OUT}/bad)
expect_refused("k without experts" "--experts-per-token" ${TRAIN_GPT} --experts-per-token 2)
expect_refused("resume with other experts" "'num_experts' was saved as '4', this module has '3'"
               ${TRAIN_GPT} ${base} --experts 3 --resume ${OUT}/saved --out ${OUT}/bad)
file(REMOVE_RECURSE ${OUT})
