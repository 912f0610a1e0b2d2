# train_gpt's refusals at the command line (run with -DTRAIN_GPT=<exe>
# -DOUT=<dir> -DDATA=<dir of the fortune files>): bad options, a missing
# corpus, a resume with other options, a prompt outside the vocabulary and a
# directory that is not a saved run each end with exit code 2 and one clear
# line on standard error. --help lists the options with their defaults.
include(${CMAKE_CURRENT_LIST_DIR}/demo_checks.cmake)
file(REMOVE_RECURSE ${OUT})
set(base --n-layer 1 --block-size 16 --batch-size 4 --steps 4 --eval-interval 4 --eval-windows 4
    --sample-chars 8 --threads 1)
set(tiny ${base} --n-head 2 --n-embd 16 --data-dir ${DATA})

execute_process(COMMAND ${TRAIN_GPT} --help RESULT_VARIABLE code OUTPUT_VARIABLE help)
foreach(part "--n-layer UINT:INT in [1 - 64]=4" "--block-size" "--lr FLOAT:POSITIVE=0.003" "--steps"
        "--save" "--resume"
        "--generate" "--prompt" "--temperature" "--top-k" "--threads")
  string(FIND "${help}" "${part}" at)
  if(NOT code EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "--help (exit ${code}) lacks '${part}':\n${help}")
  endif()
endforeach()

expect_refused("--steps 0" "--steps" ${TRAIN_GPT} ${tiny} --steps 0)
expect_refused("an unknown option" "--no-such-option" ${TRAIN_GPT} --no-such-option)
expect_refused("--lr -1" "" ${TRAIN_GPT} --lr -1)
expect_refused("--n-head 3 of 16 channels" "--n-head 3 does not divide --n-embd 16" ${TRAIN_GPT}
               ${base} --data-dir ${DATA} --n-embd 16 --n-head 3 --out ${OUT}/bad)
expect_refused("--batch-size 0" "" ${TRAIN_GPT} --batch-size 0)
expect_refused("--generate with --steps" "--generate" ${TRAIN_GPT} --generate ${OUT} --steps 5)
expect_refused("--top-k without --generate" "" ${TRAIN_GPT} --top-k 5)
expect_refused("--expert-parallel of a dense model" "--expert-parallel" ${TRAIN_GPT} ${tiny}
               --expert-parallel)

file(MAKE_DIRECTORY ${OUT}/empty)
expect_refused("no fortunes" "holds 0 fortunes" ${TRAIN_GPT} ${base} --data-dir ${OUT}/empty
               --out ${OUT}/bad)
expect_refused("no directory" "apt-get install fortunes" ${TRAIN_GPT} ${base}
               --data-dir ${OUT}/absent --out ${OUT}/bad)
file(MAKE_DIRECTORY ${OUT}/latin1)
execute_process(COMMAND printf "caf\\351\\n%%\\n" OUTPUT_FILE ${OUT}/latin1/one)
expect_refused("Latin-1 text" "invalid UTF-8 at byte 3" ${TRAIN_GPT} ${base}
               --data-dir ${OUT}/latin1 --out ${OUT}/bad)

# A saved run, then resumes and generations it refuses.
run_or_fail(output "the tiny run" 240 ${TRAIN_GPT} ${tiny} --out ${OUT}/run --save ${OUT}/saved)
expect_refused("--resume of a finished run" "nothing left to train" ${TRAIN_GPT} ${tiny}
               --out ${OUT}/run --resume ${OUT}/saved)
expect_refused("--resume with --lr 0.01" "saved with --lr 0.003, this run has 0.01" ${TRAIN_GPT}
               ${tiny} --lr 0.01 --resume ${OUT}/saved --out ${OUT}/bad)
expect_refused("--resume with --n-embd 32" "--resume '${OUT}/saved'" ${TRAIN_GPT} ${base}
               --data-dir ${DATA} --n-head 2 --n-embd 32 --resume ${OUT}/saved --out ${OUT}/bad)
expect_refused("--resume of no run" "--resume '${OUT}/empty'" ${TRAIN_GPT} ${tiny}
               --resume ${OUT}/empty --out ${OUT}/bad)
expect_refused("--generate of no run" "--generate '${OUT}/empty'" ${TRAIN_GPT}
               --generate ${OUT}/empty)
expect_refused("a prompt outside the vocabulary" "U+6F22" ${TRAIN_GPT} --generate ${OUT}/saved
               --prompt "x漢")
require_in("${error}" "is not in the model's vocabulary" "a prompt outside the vocabulary")
# Training checks the samples' prompt before its first step.
expect_refused("a training prompt outside the vocabulary" "--prompt: character 1, '漢' (U+6F22)"
               ${TRAIN_GPT} ${tiny} --prompt "x漢" --out ${OUT}/bad)
file(REMOVE_RECURSE ${OUT})
