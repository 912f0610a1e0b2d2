# train_gpt end to end with a tiny model (run with -DTRAIN_GPT=<exe> -DOUT=<dir>
# -DDATA=<dir of the fortune files>): 60 steps must bring the training and
# validation losses down (the validation loss below ln(vocab), the loss of a
# uniform guess), leave every file, and summary.json must hold its fields.
# A run of 60 steps stopped after step 30 (mid-interval) and resumed must equal
# the straight run bit for bit (summary, history, saved parameters and
# optimizer state). --generate from the saved run prints the same text for
# the same seed, starting with the prompt.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})
set(tiny --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --dropout 0.1 --batch-size 8 --steps 60
    --eval-interval 20 --eval-windows 16 --sample-chars 40 --lr 1e-2 --warmup-steps 5
    --threads 2 --seed 3 --data-dir ${DATA})
set(numbers KEYS final_train_loss final_val_loss unigram_baseline step)

run_or_fail(output train_gpt 240 ${TRAIN_GPT} ${tiny} --out ${OUT}/run --save ${OUT}/saved)
require_output("${output}" "unigram baseline" "tok/s" "--- sample after step 20 ---" "val loss")
file(READ ${OUT}/run/summary.json json)
foreach(key final_train_loss final_val_loss unigram_baseline tokens_per_second train_seconds
        steps step batch_size lr seed threads processes)
  string(JSON value ERROR_VARIABLE missing GET "${json}" ${key})
  if(missing)
    message(FATAL_ERROR "summary.json lacks '${key}':\n${json}")
  endif()
endforeach()
string(JSON vocab GET "${json}" model vocab_size)
string(JSON parameters GET "${json}" model parameters)
string(JSON records GET "${json}" data validation_records)
string(JSON train_records GET "${json}" data train_records)
string(JSON step GET "${json}" step)
string(JSON val GET "${json}" final_val_loss)
string(JSON unigram GET "${json}" unigram_baseline)
# Every 10th record is held out: validation is a ninth of training, give or take one.
math(EXPR expected "(${train_records} + ${records}) / 10")
if(NOT step EQUAL 60 OR vocab LESS 60 OR NOT records EQUAL expected)
  message(FATAL_ERROR "summary.json: step ${step}, vocabulary ${vocab}, ${records} validation "
                      "records of ${train_records} + ${records}")
endif()
# The unigram baseline of English text is near 3.3 nats; a uniform guess costs ln(vocab).
require_below(3.0 ${unigram} "3.0 vs the unigram baseline")
require_below(${unigram} 3.6 "the unigram baseline")
execute_process(COMMAND awk "BEGIN { print log(${vocab}) }" OUTPUT_VARIABLE uniform)
string(STRIP "${uniform}" uniform)
require_below(${val} ${uniform} "the final validation loss (vs ln(vocab))")
file(STRINGS ${OUT}/run/history.csv history)
list(LENGTH history rows)
list(GET history 0 header)
list(GET history 1 first)
list(GET history 3 last)
if(NOT rows EQUAL 4 OR NOT header STREQUAL "step,train_loss,val_loss,lr,seconds")
  message(FATAL_ERROR "history.csv: ${rows} lines, header '${header}'")
endif()
string(REPLACE "," ";" first "${first}")
string(REPLACE "," ";" last "${last}")
foreach(column 1 2)
  list(GET first ${column} a)
  list(GET last ${column} b)
  require_below(${b} ${a} "the loss of column ${column} at step 60 (vs step 20)")
endforeach()
file(STRINGS ${OUT}/run/samples.txt samples REGEX "^--- sample after step")
list(LENGTH samples n)
if(NOT n EQUAL 3)
  message(FATAL_ERROR "samples.txt holds ${n} samples, expected 3")
endif()
expect_png(${OUT}/run/loss.png OPTIONAL)
foreach(saved manifest.tsv scalars.tsv)
  if(NOT EXISTS ${OUT}/saved/${saved})
    message(FATAL_ERROR "--save wrote no ${saved}")
  endif()
endforeach()

# --resume continues a run bit for bit: stopped after step 30 (between two
# evaluations), then resumed from its save.
run_or_fail(output train_gpt 240 ${TRAIN_GPT} ${tiny} --out ${OUT}/first --stop-after 30
            --save ${OUT}/saved_resumed)
run_or_fail(output train_gpt 240 ${TRAIN_GPT} ${tiny} --out ${OUT}/resumed
            --resume ${OUT}/saved_resumed --save ${OUT}/saved_resumed)
expect_same_numbers(${OUT}/run ${OUT}/resumed ${numbers})
expect_same_arrays(${OUT}/saved ${OUT}/saved_resumed 10)

# The dropout modules' steps are saved: 60 steps of the embedding's, the
# attention's, the residual's and the MLP's dropout.
file(STRINGS ${OUT}/saved_resumed/scalars.tsv scalars REGEX "dropout_step")
list(LENGTH scalars n)
if(n LESS 4 OR NOT scalars MATCHES "dropout_step.drop\t60")
  message(FATAL_ERROR "saved dropout steps: ${scalars}")
endif()

# --generate: the same seed gives the same text, which continues the prompt.
set(generate --generate ${OUT}/saved --prompt "The " --max-new-chars 120 --top-k 20)
run_or_fail(a "train_gpt --generate" 240 ${TRAIN_GPT} ${generate} --seed 7)
run_or_fail(b "train_gpt --generate" 240 ${TRAIN_GPT} ${generate} --seed 7)
run_or_fail(c "train_gpt --generate" 240 ${TRAIN_GPT} ${generate} --seed 8)
string(LENGTH "${a}" length)
string(FIND "${a}" "The " at)
if(NOT a STREQUAL b OR NOT at EQUAL 0 OR length LESS 100)
  message(FATAL_ERROR "--generate --seed 7 twice:\n${a}\nthen\n${b}")
endif()
if(a STREQUAL c)
  message(FATAL_ERROR "--generate --seed 7 and --seed 8 gave the same text:\n${a}")
endif()
file(REMOVE_RECURSE ${OUT})
