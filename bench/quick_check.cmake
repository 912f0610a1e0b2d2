# Runs `bench_xtgrad --quick` and checks that its CSV and JSON hold every
# section. It asserts no time: CI machines are too noisy for that.
#   cmake -DBENCH=<bench_xtgrad> -DOUT=<dir> -P quick_check.cmake
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${BENCH} --quick --csv ${OUT}/bench.csv --json ${OUT}/bench.json
                        --markdown ${OUT}/bench.md
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
message("${output}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "bench_xtgrad --quick failed (${result}): ${errors}")
endif()
file(READ ${OUT}/bench.csv csv)
file(READ ${OUT}/bench.json json)
file(READ ${OUT}/bench.md markdown)
foreach(expected "- cpu: " "| small | xtgrad ms | roofline |" "| relu N=1 infer T=1 | ")
  string(FIND "${markdown}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "bench.md has nothing matching '${expected}':\n${markdown}")
  endif()
endforeach()
# Every section, each with a number in the xtgrad column.
foreach(expected "ffn,relu N=128 fwd\\+bwd T=1,ms,[0-9]" "ffn,swiglu N=128 fwd T=2,ms,[0-9]"
                 "small,relu N=1 infer T=1,ms,[0-9]" "small,swiglu N=8 fwd T=2,ms,[0-9]"
                 "matmul,8x512x512[^,]* fwd\\+bwd,ms,[0-9]"
                 "toy,train step[^,]*,us,[0-9]" "activation,gelu fwd n=1M,ms,[0-9]"
                 "rowwise,layer_norm 512x1024 fwd\\+bwd,ms,[0-9]"
                 "rowwise,cross_entropy 512x1024 fwd,ms,[0-9]"
                 "fashion,mlp epoch[^,]*,s/epoch,[0-9]" "fashion,mixer epoch[^,]*,s/epoch,[0-9]"
                 "memory,swiglu N=128 fwd\\+bwd peak,MiB,[0-9]")
  string(REGEX MATCH "${expected}" found "${csv}")
  if(NOT found)
    message(FATAL_ERROR "bench.csv has no row matching '${expected}':\n${csv}")
  endif()
endforeach()
foreach(expected "\"threads\": \"2\"" "\"section\": \"memory\"" "\"vector_extensions\": "
                 "\"load_average\": ")
  string(FIND "${json}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "bench.json lacks ${expected}:\n${json}")
  endif()
endforeach()
