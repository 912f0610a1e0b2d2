# train_gpt's refusals at the command line (run with -DTRAIN_GPT=<exe>
# -DOUT=<dir> -DDATA=<dir of the fortune files>): bad options, a missing
# corpus, a resume with other options, a prompt outside the vocabulary and a
# directory that is not a saved run each end with exit code 2 and one clear
# line on standard error. --help lists the options with their defaults.
file(REMOVE_RECURSE ${OUT})
set(base --n-layer 1 --block-size 16 --batch-size 4 --steps 4 --eval-interval 4 --eval-windows 4
    --sample-chars 8 --threads 1)
set(tiny ${base} --n-head 2 --n-embd 16 --data-dir ${DATA})

function(refused label)
  execute_process(COMMAND ${TRAIN_GPT} ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE output
                  ERROR_VARIABLE error TIMEOUT 240)
  string(STRIP "${error}" error)
  string(FIND "${error}" "\n" newline)
  if(NOT code EQUAL 2 OR NOT newline EQUAL -1 OR error STREQUAL "")
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

execute_process(COMMAND ${TRAIN_GPT} --help RESULT_VARIABLE code OUTPUT_VARIABLE help)
foreach(part "--n-layer UINT:INT in [1 - 64]=4" "--block-size" "--lr FLOAT:POSITIVE=0.003" "--steps" "--save" "--resume"
        "--generate" "--prompt" "--temperature" "--top-k" "--threads")
  string(FIND "${help}" "${part}" at)
  if(NOT code EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "--help (exit ${code}) lacks '${part}':\n${help}")
  endif()
endforeach()

refused("--steps 0" ${tiny} --steps 0)
require_in("${error}" "--steps" "--steps 0")
refused("an unknown option" --no-such-option)
require_in("${error}" "--no-such-option" "an unknown option")
refused("--lr -1" --lr -1)
refused("--n-head 3 of 16 channels" ${base} --data-dir ${DATA} --n-embd 16 --n-head 3 --out ${OUT}/bad)
require_in("${error}" "--n-head 3 does not divide --n-embd 16" "--n-head 3")
refused("--batch-size 0" --batch-size 0)
refused("--generate with --steps" --generate ${OUT} --steps 5)
require_in("${error}" "--generate" "--generate with --steps")
refused("--top-k without --generate" --top-k 5)

file(MAKE_DIRECTORY ${OUT}/empty)
refused("no fortunes" ${base} --data-dir ${OUT}/empty --out ${OUT}/bad)
require_in("${error}" "holds 0 fortunes" "no fortunes")
refused("no directory" ${base} --data-dir ${OUT}/absent --out ${OUT}/bad)
require_in("${error}" "apt-get install fortunes" "no directory")
file(MAKE_DIRECTORY ${OUT}/latin1)
execute_process(COMMAND printf "caf\\351\\n%%\\n" OUTPUT_FILE ${OUT}/latin1/one)
refused("Latin-1 text" ${base} --data-dir ${OUT}/latin1 --out ${OUT}/bad)
require_in("${error}" "invalid UTF-8 at byte 3" "Latin-1 text")

# A saved run, then resumes and generations it refuses.
execute_process(COMMAND ${TRAIN_GPT} ${tiny} --out ${OUT}/run --save ${OUT}/saved
                RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error TIMEOUT 240)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the tiny run failed (${code}):\n${output}\n${error}")
endif()
refused("--resume of a finished run" ${tiny} --out ${OUT}/run --resume ${OUT}/saved)
require_in("${error}" "nothing left to train" "--resume of a finished run")
refused("--resume with --lr 0.01" ${tiny} --lr 0.01 --resume ${OUT}/saved --out ${OUT}/bad)
require_in("${error}" "saved with --lr 0.003, this run has 0.01" "--resume with --lr 0.01")
refused("--resume with --n-embd 32" ${base} --data-dir ${DATA} --n-head 2 --n-embd 32 --resume ${OUT}/saved
        --out ${OUT}/bad)
require_in("${error}" "--resume '${OUT}/saved'" "--resume with --n-embd 32")
refused("--resume of no run" ${tiny} --resume ${OUT}/empty --out ${OUT}/bad)
require_in("${error}" "--resume '${OUT}/empty'" "--resume of no run")
refused("--generate of no run" --generate ${OUT}/empty)
require_in("${error}" "--generate '${OUT}/empty'" "--generate of no run")
refused("a prompt outside the vocabulary" --generate ${OUT}/saved --prompt "x漢")
require_in("${error}" "U+6F22" "a prompt outside the vocabulary")
require_in("${error}" "is not in the model's vocabulary" "a prompt outside the vocabulary")
# Training checks the samples' prompt before its first step.
refused("a training prompt outside the vocabulary" ${tiny} --prompt "x漢" --out ${OUT}/bad)
require_in("${error}" "--prompt: character 1, '漢' (U+6F22)" "a training prompt outside the vocabulary")
file(REMOVE_RECURSE ${OUT})
