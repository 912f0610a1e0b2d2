# train_fashion end to end on a subset (run with -DTRAIN_FASHION=<exe>
# -DOUT=<dir> -DDATA=<dir of the Fashion-MNIST files>): one epoch on 2,000
# training images, evaluated on 1,000 test images; the MLP must land far
# above chance (0.1), the files must be there and well-formed, and a second
# run with the same seed must give the same numbers bit for bit. A run of 2
# epochs stopped after the first and resumed must equal the straight run bit
# for bit (summary, history, saved parameters and optimizer state). The small
# Mixer learns, and --graph / --profile show its steps. Then bad data and
# bad resumes at the command line: exit code 2 and one clear line.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})
set(subset --train-limit 2000 --test-limit 1000 --seed 3 --threads 2)

set(numbers KEYS final_train_loss final_test_loss final_test_accuracy steps train_images
    test_images)

run_or_fail(output train_fashion 300 ${TRAIN_FASHION} ${subset} --out ${OUT}/run --model mlp
            --epochs 1 --save ${OUT}/saved)
file(READ ${OUT}/run/summary.json json)
string(JSON accuracy GET "${json}" final_test_accuracy)
string(JSON images GET "${json}" train_images)
string(JSON kind GET "${json}" model kind)
string(JSON parameters GET "${json}" model parameters)
# 784*256+256 + 256*256+256 + 256*10+10
if(NOT images EQUAL 2000 OR NOT kind STREQUAL "mlp" OR NOT parameters EQUAL 269322)
  message(FATAL_ERROR "summary.json: train_images ${images}, model ${kind}, ${parameters} parameters")
endif()
require_below(0.5 ${accuracy} "0.5 vs the MLP's test accuracy")
file(STRINGS ${OUT}/run/history.csv history)
list(LENGTH history rows)
list(GET history 0 header)
if(NOT rows EQUAL 2 OR NOT header STREQUAL "epoch,train_loss,test_loss,test_accuracy,lr,seconds")
  message(FATAL_ERROR "history.csv: ${rows} lines, header '${header}'")
endif()
file(STRINGS ${OUT}/run/confusion.csv confusion)
list(LENGTH confusion rows)
set(total 0)
foreach(row ${confusion})
  string(REPLACE "," ";" cells "${row}")
  list(LENGTH cells n)
  if(NOT n EQUAL 10)
    message(FATAL_ERROR "confusion.csv: a row of ${n} cells")
  endif()
  foreach(c ${cells})
    math(EXPR total "${total} + ${c}")
  endforeach()
endforeach()
if(NOT rows EQUAL 10 OR NOT total EQUAL 1000)
  message(FATAL_ERROR "confusion.csv: ${rows} rows counting ${total} images, expected 10 and 1000")
endif()
foreach(png loss accuracy confusion misclassified)
  expect_png(${OUT}/run/${png}.png)
endforeach()
foreach(saved manifest.tsv scalars.tsv model.0.weight.npy optimizer.state.0.exp_avg_sq.npy)
  if(NOT EXISTS ${OUT}/saved/${saved})
    message(FATAL_ERROR "--save wrote no ${saved}")
  endif()
endforeach()

# Same seed: the same numbers, bit for bit.
run_or_fail(output train_fashion 300 ${TRAIN_FASHION} ${subset} --out ${OUT}/again --model mlp
            --epochs 1)
expect_same_numbers(${OUT}/run ${OUT}/again ${numbers})

# --augment flip changes the numbers of the same seed (the images it sees), and
# the summary says which augmentation ran (none: the MLP's default).
run_or_fail(output train_fashion 300 ${TRAIN_FASHION} ${subset} --out ${OUT}/flipped --model mlp
            --epochs 1 --augment flip)
read_numbers(${OUT}/run a ${numbers})
read_numbers(${OUT}/flipped b ${numbers})
file(READ ${OUT}/flipped/summary.json json)
string(JSON flipped GET "${json}" augment)
file(READ ${OUT}/run/summary.json json)
string(JSON plain GET "${json}" augment)
if(a STREQUAL b OR NOT flipped STREQUAL "flip" OR NOT plain STREQUAL "none")
  message(FATAL_ERROR "--augment flip: augment '${flipped}' (default '${plain}'), numbers ${b}")
endif()

# --resume continues a run bit for bit: 2 epochs straight, and 2 epochs
# stopped after the first, then resumed from its save.
run_or_fail(output train_fashion 300 ${TRAIN_FASHION} ${subset} --out ${OUT}/straight --model mlp
            --epochs 2 --save ${OUT}/saved_straight)
run_or_fail(output train_fashion 300 ${TRAIN_FASHION} ${subset} --out ${OUT}/first --model mlp
            --epochs 2 --stop-after 1 --save ${OUT}/saved_resumed)
file(STRINGS ${OUT}/first/history.csv first)
list(LENGTH first rows)
if(NOT rows EQUAL 2)
  message(FATAL_ERROR "--stop-after 1: history ${first}")
endif()
run_or_fail(output train_fashion 300 ${TRAIN_FASHION} ${subset} --out ${OUT}/resumed --model mlp
            --epochs 2 --resume ${OUT}/saved_resumed
  --save ${OUT}/saved_resumed)
read_numbers(${OUT}/straight a ${numbers})
read_numbers(${OUT}/resumed b ${numbers})
list(LENGTH b rows)
if(NOT a STREQUAL b OR NOT rows EQUAL 9)
  message(FATAL_ERROR "--resume differs from the straight run:\n${a}\nthen\n${b}")
endif()
expect_same_arrays(${OUT}/saved_straight ${OUT}/saved_resumed 18)
# The dropout modules' steps are saved: 2 epochs of 16 steps each.
file(STRINGS ${OUT}/saved_resumed/scalars.tsv scalars REGEX "dropout_step")
if(NOT scalars STREQUAL "int64\textra.dropout_step.2\t32;int64\textra.dropout_step.5\t32")
  message(FATAL_ERROR "saved dropout steps: ${scalars}")
endif()

# The default Mixer's size, in one step on 128 images: 16*128+128 + 4 * (2*128 +
# 49*64+64+64*49+49 + 2*128 + 128*256+256+256*128+128) + 2*128 + 128*10+10.
execute_process(COMMAND ${TRAIN_FASHION} --model mixer --epochs 1 --train-limit 128
  --test-limit 10 --out ${OUT}/default_mixer RESULT_VARIABLE code OUTPUT_VARIABLE output)
string(FIND "${output}" "train_fashion: mixer, 294990 parameters;" at)
if(NOT code EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "the default Mixer (exit ${code}):\n${output}")
endif()

# A small Mixer on the same subset learns too (reference_torch.py: 12,844 parameters,
# accuracy 0.606 with these options).
# --graph (as .dot text, no Graphviz needed) and --profile of its last 3 steps.
run_or_fail(output train_fashion 300 ${TRAIN_FASHION} ${subset} --out ${OUT}/mixer --model mixer
            --width 32 --blocks 2 --token-hidden 16 --channel-hidden 64
  --epochs 2 --lr 0.01 --warmup-epochs 0.1 --graph ${OUT}/step.dot --profile --profile-steps 3)
file(READ ${OUT}/mixer/summary.json json)
string(JSON accuracy GET "${json}" final_test_accuracy)
string(JSON augment GET "${json}" augment)
if(NOT augment STREQUAL "flip")
  message(FATAL_ERROR "the Mixer's default augmentation is '${augment}', expected flip")
endif()
string(JSON parameters GET "${json}" model parameters)
require_below(0.3 ${accuracy} "0.3 vs the small Mixer's test accuracy")
# 16*32+32 + 2 * (2*32 + 49*16+16+16*49+49 + 2*32 + 32*64+64+64*32+32) + 2*32 + 32*10+10
if(NOT parameters EQUAL 12844)
  message(FATAL_ERROR "the small Mixer has ${parameters} parameters, expected 12844")
endif()
file(READ ${OUT}/step.dot dot)
foreach(part "digraph" "layer_norm" "transpose" "activation_linear" "cross_entropy"
        "0.weight" "1.ffn.w2.weight" "2.ffn.w1.weight" "4.norm.weight" "5.bias" "head.weight")
  string(FIND "${dot}" "${part}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--graph: step.dot lacks '${part}'")
  endif()
endforeach()
foreach(part "Profile of the last 3 training steps" "layer_norm.backward" "optimizer.step")
  string(FIND "${output}" "${part}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--profile: the output lacks '${part}':\n${output}")
  endif()
endforeach()

# Bad data: a file of 27 x 27 images, a label out of range, no files at all.
set(bad_data ${TRAIN_FASHION} --out ${OUT}/bad --data-dir)
# Raw IDX files written here byte by byte: magic, type 0x08, ndim, big-endian dims.
function(write_idx file hex)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" escaped "${hex}")
  execute_process(COMMAND printf "${escaped}" OUTPUT_FILE ${file})
endfunction()
set(two_labels "0000080100000002")  # labels [2]
set(dir ${OUT}/data_27)
file(MAKE_DIRECTORY ${dir})
string(REPEAT "00" 1458 pixels)  # 2 x 27 x 27
write_idx(${dir}/train-images-idx3-ubyte "00000803000000020000001b0000001b${pixels}")
write_idx(${dir}/train-labels-idx1-ubyte "${two_labels}0001")
expect_refused("27 x 27 images" "train-images-idx3-ubyte" ${bad_data} ${dir})
require_in("${error}" "[2, 27, 27], expected [N, 28, 28]" "27 x 27 images")

set(dir ${OUT}/data_label)
file(MAKE_DIRECTORY ${dir})
string(REPEAT "00" 1568 pixels)  # 2 x 28 x 28
write_idx(${dir}/train-images-idx3-ubyte "00000803000000020000001c0000001c${pixels}")
write_idx(${dir}/train-labels-idx1-ubyte "${two_labels}030a")
expect_refused("a label of 10" "train-labels-idx1-ubyte" ${bad_data} ${dir})
require_in("${error}" "label 1 is 10, expected 0 to 9" "a label of 10")

set(dir ${OUT}/data_truncated)
file(MAKE_DIRECTORY ${dir})
write_idx(${dir}/train-images-idx3-ubyte "00000803000000020000001c0000001c0000")
write_idx(${dir}/train-labels-idx1-ubyte "${two_labels}0000")
expect_refused("truncated images" "is truncated" ${bad_data} ${dir})

file(MAKE_DIRECTORY ${OUT}/empty)
expect_refused("an empty directory" "train-images-idx3-ubyte.gz" ${bad_data} ${OUT}/empty)
require_in("${error}" "apt-get install dataset-fashion-mnist" "an empty directory")

# A bad option: exit code 2 too.
expect_refused("--epochs 0" "" ${bad_data} ${DATA} --epochs 0)

# Bad resumes: other options than the saved run's, a finished run, no saved run.
expect_refused("--resume with --epochs 3" "saved with --epochs 2, this run has 3" ${bad_data}
               ${DATA} ${subset} --epochs 3 --resume ${OUT}/saved_resumed)
expect_refused("--resume with --seed 4" "saved with --seed 3, this run has 4" ${bad_data} ${DATA}
               --train-limit 2000 --test-limit 1000 --seed 4 --epochs 2
               --resume ${OUT}/saved_resumed)
expect_refused("--resume with --augment flip" "saved with --augment none, this run has flip"
               ${bad_data} ${DATA} ${subset} --epochs 2 --augment flip
               --resume ${OUT}/saved_resumed)
expect_refused("--resume of a finished run" "nothing left to train" ${bad_data} ${DATA} ${subset}
               --epochs 2 --resume ${OUT}/saved_resumed)
expect_refused("--resume of a mixer as an mlp" "--resume '${OUT}/saved_resumed'" ${bad_data} ${DATA}
               ${subset} --epochs 2 --model mixer --resume ${OUT}/saved_resumed)
expect_refused("--resume of no run" "--resume '${OUT}/empty'" ${bad_data} ${DATA} ${subset}
               --resume ${OUT}/empty)
file(REMOVE_RECURSE ${OUT})
