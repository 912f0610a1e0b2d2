# Runs `bench_attention --quick` and checks that its CSV, JSON and Markdown
# hold every section with a number in the xtgrad column. It asserts no time:
# CI machines are too noisy for that.
#   cmake -DBENCH=<bench_attention> -DOUT=<dir> -P attention_quick_check.cmake
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${BENCH} --quick --csv ${OUT}/bench.csv --json ${OUT}/bench.json
                        --markdown ${OUT}/bench.md
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
message("${output}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "bench_attention --quick failed (${result}): ${errors}")
endif()
file(READ ${OUT}/bench.csv csv)
file(READ ${OUT}/bench.json json)
file(READ ${OUT}/bench.md markdown)
foreach(expected "- cpu: " "| attention | xtgrad ms | GEMM floor |" "| BH=2 T=64 causal th=1 | ")
  string(FIND "${markdown}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "bench.md has nothing matching '${expected}':\n${markdown}")
  endif()
endforeach()
# Every section, each with a number in the xtgrad column (and in the floor's
# for attention).
foreach(expected "attention,BH=2 T=64 full th=1,ms,[0-9][^,]*,[0-9]"
                 "attention,BH=2 T=64 causal th=2,ms,[0-9][^,]*,[0-9]"
                 "scaling,BH=2 T=64 causal Dh=16 th=2 / th=1,ms,[0-9][^,]*,[0-9]"
                 "gpt,char L2 H2 C32 T32 B4,ms,[0-9]"
                 "gpt,block L1 H4 C64 T64 B1,ms,[0-9]"
                 "memory,attention BH=8 T=128 full,MiB,[0-9]"
                 "memory,attention BH=8 T=128 causal,MiB,[0-9]"
                 "memory,char L2 H2 C32 T32 B4 step,MiB,[0-9]"
                 "memory,block L1 H4 C64 T64 B1 step,MiB,[0-9]")
  string(REGEX MATCH "${expected}" found "${csv}")
  if(NOT found)
    message(FATAL_ERROR "bench.csv has no row matching '${expected}':\n${csv}")
  endif()
endforeach()
# The precision rows where the CPU has a native bf16 matmul; elsewhere the
# run must say why it skipped them.
if(errors MATCHES "precision: skipped")
  set(precision_rows)
else()
  set(precision_rows "precision,char L2 H2 C32 T32 B4 bf16 / f32,ms,[0-9][^,]*,[0-9]"
                     "precision,block L1 H4 C64 T64 B1 bf16 / f32,ms,[0-9][^,]*,[0-9]")
endif()
foreach(expected ${precision_rows})
  string(REGEX MATCH "${expected}" found "${csv}")
  if(NOT found)
    message(FATAL_ERROR "bench.csv has no row matching '${expected}':\n${csv}")
  endif()
endforeach()
foreach(expected "\"threads\": \"2\"" "\"section\": \"memory\"" "\"cpu\": " "\"load_average\": ")
  string(FIND "${json}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "bench.json lacks ${expected}:\n${json}")
  endif()
endforeach()
