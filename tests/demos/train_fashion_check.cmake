# train_fashion end to end on a subset (run with -DTRAIN_FASHION=<exe>
# -DOUT=<dir> -DDATA=<dir of the Fashion-MNIST files>): one epoch on 2,000
# training images, evaluated on 1,000 test images; the MLP must land far
# above chance (0.1), the files must be there and well-formed, and a second
# run with the same seed must give the same numbers bit for bit. Then bad
# data at the command line: exit code 2 and one clear line.
file(REMOVE_RECURSE ${OUT})
set(subset --train-limit 2000 --test-limit 1000 --seed 3 --threads 2)

function(run_fashion out_dir)
  execute_process(COMMAND ${TRAIN_FASHION} ${subset} --out ${out_dir} ${ARGN}
    RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "train_fashion failed (${code}):\n${output}\n${error}")
  endif()
endfunction()

function(require_below value bound what)
  execute_process(COMMAND awk "BEGIN { exit !(${value} < ${bound}) }" RESULT_VARIABLE below)
  if(NOT below EQUAL 0)
    message(FATAL_ERROR "${what} = ${value}, expected below ${bound}")
  endif()
endfunction()

# The numbers of a run that must repeat: the summary's results and the
# history without its seconds column.
function(read_numbers dir var)
  file(READ ${dir}/summary.json json)
  set(numbers "")
  foreach(key final_train_loss final_test_loss final_test_accuracy steps train_images test_images)
    string(JSON value GET "${json}" ${key})
    list(APPEND numbers "${key}=${value}")
  endforeach()
  file(STRINGS ${dir}/history.csv lines)
  foreach(line ${lines})
    string(REGEX REPLACE ",[^,]*$" "" line "${line}")
    list(APPEND numbers "${line}")
  endforeach()
  set(${var} "${numbers}" PARENT_SCOPE)
endfunction()

run_fashion(${OUT}/run --model mlp --epochs 1 --save ${OUT}/saved)
file(READ ${OUT}/run/summary.json json)
string(JSON accuracy GET "${json}" final_test_accuracy)
string(JSON images GET "${json}" train_images)
string(JSON kind GET "${json}" model kind)
if(NOT images EQUAL 2000 OR NOT kind STREQUAL "mlp")
  message(FATAL_ERROR "summary.json: train_images ${images}, model ${kind}")
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
  file(READ ${OUT}/run/${png}.png magic LIMIT 8 HEX)
  if(NOT magic STREQUAL "89504e470d0a1a0a")
    message(FATAL_ERROR "${png}.png is not a PNG file")
  endif()
endforeach()
foreach(saved state.json model/manifest.tsv)
  if(NOT EXISTS ${OUT}/saved/${saved})
    message(FATAL_ERROR "--save wrote no ${saved}")
  endif()
endforeach()

# Same seed: the same numbers, bit for bit.
run_fashion(${OUT}/again --model mlp --epochs 1)
read_numbers(${OUT}/run a)
read_numbers(${OUT}/again b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "not reproducible:\n${a}\nthen\n${b}")
endif()

# --resume continues the saved run: its first epoch is kept, one more is trained.
run_fashion(${OUT}/resumed --model mlp --epochs 2 --resume ${OUT}/saved)
file(STRINGS ${OUT}/run/history.csv first)
file(STRINGS ${OUT}/resumed/history.csv resumed)
list(LENGTH resumed rows)
list(GET first 1 first_epoch)
list(GET resumed 1 resumed_epoch)
if(NOT rows EQUAL 3 OR NOT first_epoch STREQUAL resumed_epoch)
  message(FATAL_ERROR "--resume: history ${resumed}, the saved run had ${first}")
endif()

# A small Mixer on the same subset learns too (PyTorch: 0.52 with these options).
run_fashion(${OUT}/mixer --model mixer --width 32 --blocks 2 --token-hidden 16 --channel-hidden 64
  --epochs 2 --lr 0.01 --warmup-epochs 0.1)
file(READ ${OUT}/mixer/summary.json json)
string(JSON accuracy GET "${json}" final_test_accuracy)
require_below(0.3 ${accuracy} "0.3 vs the small Mixer's test accuracy")

# Bad data: a file of 27 x 27 images, a label out of range, no files at all.
function(bad_data label dir)
  execute_process(COMMAND ${TRAIN_FASHION} --data-dir ${dir} --out ${OUT}/bad ${ARGN}
    RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error)
  string(STRIP "${error}" error)
  string(FIND "${error}" "\n" newline)
  if(NOT code EQUAL 2 OR NOT newline EQUAL -1)
    message(FATAL_ERROR "${label}: exit ${code}, stderr '${error}' (expected one line, exit 2)")
  endif()
  set(error "${error}" PARENT_SCOPE)
endfunction()
function(require_in text part label)
  string(FIND "${text}" "${part}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${label}: the message '${text}' lacks '${part}'")
  endif()
endfunction()

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
bad_data("27 x 27 images" ${dir})
require_in("${error}" "train-images-idx3-ubyte" "27 x 27 images")
require_in("${error}" "[2, 27, 27], expected [N, 28, 28]" "27 x 27 images")

set(dir ${OUT}/data_label)
file(MAKE_DIRECTORY ${dir})
string(REPEAT "00" 1568 pixels)  # 2 x 28 x 28
write_idx(${dir}/train-images-idx3-ubyte "00000803000000020000001c0000001c${pixels}")
write_idx(${dir}/train-labels-idx1-ubyte "${two_labels}030a")
bad_data("a label of 10" ${dir})
require_in("${error}" "train-labels-idx1-ubyte" "a label of 10")
require_in("${error}" "label 1 is 10, expected 0 to 9" "a label of 10")

set(dir ${OUT}/data_truncated)
file(MAKE_DIRECTORY ${dir})
write_idx(${dir}/train-images-idx3-ubyte "00000803000000020000001c0000001c0000")
write_idx(${dir}/train-labels-idx1-ubyte "${two_labels}0000")
bad_data("truncated images" ${dir})
require_in("${error}" "is truncated" "truncated images")

file(MAKE_DIRECTORY ${OUT}/empty)
bad_data("an empty directory" ${OUT}/empty)
require_in("${error}" "train-images-idx3-ubyte.gz" "an empty directory")
require_in("${error}" "apt-get install dataset-fashion-mnist" "an empty directory")

# A bad option: exit code 2 too.
bad_data("--epochs 0" ${DATA} --epochs 0)
file(REMOVE_RECURSE ${OUT})
