# train_toy --graph and --profile as a test (run with -DTRAIN_TOY=<exe>
# -DOUT=<dir>): the picture of a step names every parameter of both models,
# and the profile counts exactly the ops of the last steps.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
find_program(DOT dot)
if(DOT)
  set(graph ${OUT}/graph.svg)
else()
  message(STATUS "SKIPPED the SVG check: Graphviz's dot is not installed; checking the .dot text")
  set(graph ${OUT}/graph.dot)
endif()
execute_process(COMMAND ${TRAIN_TOY} --seed 1 --steps 30 --out ${OUT}/run --graph ${graph}
                        --profile --profile-steps 10 --profile-sort calls
                        --profile-csv ${OUT}/profile.csv --profile-json ${OUT}/profile.json
  RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "train_toy failed (${code}):\n${output}\n${error}")
endif()

file(READ ${graph} picture)
foreach(name ffn.w1.weight ffn.w1.bias ffn.w2.weight ffn.w2.bias baseline.first.weight
             baseline.first.bias baseline.second.weight baseline.second.bias activation_linear)
  string(FIND "${picture}" "${name}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${graph} does not show ${name}")
  endif()
endforeach()

string(FIND "${output}" "Profile of the last 10 training steps (sorted by calls)" at)
if(at EQUAL -1)
  message(FATAL_ERROR "no profile table in the output:\n${output}")
endif()

# Per step: 2 leaves, 8 Parameters, 3 linear and 1 activation_linear forward
# and backward, 2 mse and their backward, one optimizer region.
file(READ ${OUT}/profile.json json)
string(JSON rows LENGTH "${json}" rows)
math(EXPR last "${rows} - 1")
set(expected "leaf=20;param=80;linear=30;linear.backward=30;activation_linear=10;activation_linear.backward=10;mse=20;mse.backward=20;optimizer.step=10;[outside ops]=10")
set(found "")
foreach(i RANGE ${last})
  string(JSON name GET "${json}" rows ${i} name)
  string(JSON calls GET "${json}" rows ${i} calls)
  list(APPEND found "${name}=${calls}")
endforeach()
list(SORT found)
list(SORT expected)
if(NOT found STREQUAL expected)
  message(FATAL_ERROR "profile rows ${found}, expected ${expected}")
endif()
file(STRINGS ${OUT}/profile.csv csv)
list(LENGTH csv lines)
math(EXPR want "${rows} + 1")
if(NOT lines EQUAL want)
  message(FATAL_ERROR "profile.csv has ${lines} lines, expected ${want}")
endif()
