# finetune end to end on its own tiny random LLaMA (run with -DFINETUNE=<exe>
# -DOUT=<dir> -DDATA=<dir of the fortune files> -DTOKENIZER=<a tokenizer
# directory>): a few LoRA steps on the fortunes byte by byte must leave the
# adapter (PEFT's two files), the samples before and after, one history row
# per step and a summary whose held-out loss went down; a run with a BPE
# tokenizer on one fortune file must work too; a bad option is one line and
# exit code 2.
file(REMOVE_RECURSE ${OUT})
set(tiny --steps 12 --batch-size 4 --block-size 32 --eval-windows 8 --max-new-tokens 8
    --lr 1e-2 --threads 2 --seed 3)

function(run_finetune out_var)
  execute_process(COMMAND ${FINETUNE} ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE output
                  ERROR_VARIABLE error TIMEOUT 240)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "finetune ${ARGN} failed (${code}):\n${output}\n${error}")
  endif()
  set(${out_var} "${output}" PARENT_SCOPE)
endfunction()

run_finetune(output ${tiny} --text ${DATA} --out ${OUT}/bytes)
foreach(file adapter/adapter_model.safetensors adapter/adapter_config.json samples.txt
        history.csv summary.json tiny_llama/config.json tiny_llama/model.safetensors)
  if(NOT EXISTS ${OUT}/bytes/${file})
    message(FATAL_ERROR "finetune wrote no ${file}:\n${output}")
  endif()
endforeach()
file(STRINGS ${OUT}/bytes/history.csv rows)
list(LENGTH rows count)
if(NOT count EQUAL 13)
  message(FATAL_ERROR "history.csv has ${count} lines, expected a header and 12 steps")
endif()
file(READ ${OUT}/bytes/summary.json json)
string(JSON before GET "${json}" held_out_loss_before)
string(JSON after GET "${json}" held_out_loss_after)
execute_process(COMMAND awk "BEGIN { exit !(${after} < ${before}) }" RESULT_VARIABLE down)
if(NOT down EQUAL 0)
  message(FATAL_ERROR "the held-out loss went from ${before} to ${after}, expected it lower")
endif()
file(READ ${OUT}/bytes/samples.txt samples)
if(NOT samples MATCHES "---- before" OR NOT samples MATCHES "---- after")
  message(FATAL_ERROR "samples.txt lacks the samples before and after:\n${samples}")
endif()

run_finetune(output ${tiny} --text ${DATA}/debian --tokenizer ${TOKENIZER} --out ${OUT}/bpe)
if(NOT output MATCHES "byte-level BPE")
  message(FATAL_ERROR "finetune --tokenizer did not use the BPE:\n${output}")
endif()

execute_process(COMMAND ${FINETUNE} --rank 0 --out ${OUT}/bad RESULT_VARIABLE code
                OUTPUT_VARIABLE output ERROR_VARIABLE error TIMEOUT 60)
if(NOT code EQUAL 2 OR NOT error MATCHES "--rank")
  message(FATAL_ERROR "finetune --rank 0 exited ${code}, expected 2 and a message on --rank:\n${error}")
endif()
