# Puts the Markdown table of a bench_xtgrad run (--markdown FILE) into
# docs/benchmarks.md, between the lines <!-- bench-results --> and
# <!-- /bench-results -->:
#   cmake -DTABLE=bench.md -P bench/update_results.cmake
# -DMARKER=bench-attention-results does the same for bench_attention's table;
# -DDOC=FILE writes into another page.
if(NOT DEFINED MARKER)
  set(MARKER bench-results)
endif()
if(NOT DEFINED DOC)
  set(DOC ${CMAKE_CURRENT_LIST_DIR}/../docs/benchmarks.md)
endif()
file(READ ${TABLE} table)
file(READ ${DOC} doc)
set(open "<!-- ${MARKER} -->\n")
set(close "<!-- /${MARKER} -->")
string(FIND "${doc}" "${open}" begin)
string(FIND "${doc}" "${close}" end)
if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
  message(FATAL_ERROR "${DOC} has no ${open} ... ${close} block")
endif()
string(LENGTH "${open}" open_length)
math(EXPR body_begin "${begin} + ${open_length}")
string(SUBSTRING "${doc}" 0 ${body_begin} head)
string(SUBSTRING "${doc}" ${end} -1 tail)
file(WRITE ${DOC} "${head}${table}${tail}")
