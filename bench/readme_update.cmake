# Puts the Markdown table of a bench_xtgrad run (--markdown FILE) into the
# README, between the lines <!-- bench-results --> and <!-- /bench-results -->:
#   cmake -DTABLE=bench.md -DREADME=README.md -P bench/readme_update.cmake
# -DMARKER=bench-attention-results does the same for bench_attention's table.
if(NOT DEFINED MARKER)
  set(MARKER bench-results)
endif()
file(READ ${TABLE} table)
file(READ ${README} readme)
set(open "<!-- ${MARKER} -->\n")
set(close "<!-- /${MARKER} -->")
string(FIND "${readme}" "${open}" begin)
string(FIND "${readme}" "${close}" end)
if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
  message(FATAL_ERROR "${README} has no ${open} ... ${close} block")
endif()
string(LENGTH "${open}" open_length)
math(EXPR body_begin "${begin} + ${open_length}")
string(SUBSTRING "${readme}" 0 ${body_begin} head)
string(SUBSTRING "${readme}" ${end} -1 tail)
file(WRITE ${README} "${head}${table}${tail}")
