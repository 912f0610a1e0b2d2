# The C++ blocks of README.md and docs/*.md, checked by the test suite.
#
# The line right above a ```cpp fence says how its block is checked:
#
#   <!-- verbatim: PATH -->    the block is the file PATH (relative to the
#                              source tree), byte for byte. PATH compiles
#                              with its own target (a demo or a test); the
#                              test "docs: the block of DOC after <!--
#                              verbatim: PATH --> is that file" compares the
#                              two (MODE=verbatim below).
#   <!-- snippet: CONTEXT -->  a fragment: statements, compiled as the body of
#                              a function after `using namespace xtgrad;` and
#                              `using namespace docs_context::CONTEXT;`
#                              (tests/docs/snippet_context.hpp declares the
#                              names the fragments of each context use
#                              without defining them: the data, a model, a
#                              tape). CONTEXT toplevel compiles the block at
#                              namespace scope instead (classes, functions).
#                              Contexts whose name starts with "distributed"
#                              compile only when distributed/ is built.
#   anything else              a fragment of the context "none".
#
# A block's #include lines move to the top of the generated file and leave an
# empty line behind, and a #line directive before each block keeps compiler
# messages on DOC's own lines ("docs/ops.md:123: error: ...").
#
# MODE=extract   SOURCE_DIR, OUTPUT_DIR, DOCS (pages relative to SOURCE_DIR,
#                separated by commas): writes OUTPUT_DIR/<page>.cpp per page, e.g.
#                docs_ops_md.cpp, rewritten only when its text changes. The
#                target docs_snippets compiles them; nothing is linked or run.
# MODE=verbatim  SOURCE_DIR, DOC, PATH: fails unless the block after
#                <!-- verbatim: PATH --> in DOC is PATH's whole text.
#
# The text is never split into a CMake list (C++ is full of semicolons): it
# is walked with string(FIND) and string(SUBSTRING).

cmake_minimum_required(VERSION 3.25)  # policies of a script run with -P

set(fence "```cpp\n")
string(LENGTH "${fence}" fence_length)

# The code of the ```cpp block starting at `start` (the index of its fence)
# in `text`; sets <out>, and <out>_end to the index just past its closing
# fence line. Fails when the block is not closed.
function(docs_block text start doc out)
  math(EXPR code_start "${start} + ${fence_length}")
  string(SUBSTRING "${text}" ${code_start} -1 rest)
  string(FIND "${rest}" "\n```\n" close)
  if(close EQUAL -1)
    message(FATAL_ERROR "${doc}: a ```cpp block is not closed by a ``` line")
  endif()
  math(EXPR code_length "${close} + 1")
  string(SUBSTRING "${rest}" 0 ${code_length} code)
  math(EXPR end "${code_start} + ${close} + 5")
  set(${out} "${code}" PARENT_SCOPE)
  set(${out}_end ${end} PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "verbatim")
  file(READ "${SOURCE_DIR}/${DOC}" text)
  set(marker "<!-- verbatim: ${PATH} -->\n")
  string(FIND "${text}" "${marker}${fence}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${DOC} has no ```cpp block right after the line <!-- verbatim: ${PATH} -->")
  endif()
  string(LENGTH "${marker}" marker_length)
  math(EXPR at "${at} + ${marker_length}")
  docs_block("${text}" ${at} "${DOC}" code)
  file(READ "${SOURCE_DIR}/${PATH}" source)
  if(NOT code STREQUAL source)
    message(FATAL_ERROR "The block after <!-- verbatim: ${PATH} --> in ${DOC} is not ${PATH} "
                        "byte for byte: paste the file into it")
  endif()
  return()
endif()

if(NOT MODE STREQUAL "extract")
  message(FATAL_ERROR "tests/docs/snippets.cmake: MODE must be extract or verbatim")
endif()

string(REPLACE "," ";" docs "${DOCS}")
foreach(doc IN LISTS docs)
  file(READ "${SOURCE_DIR}/${doc}" text)
  string(MAKE_C_IDENTIFIER "${doc}" name)
  set(includes "")
  set(mpi_includes "")
  set(blocks "")
  set(count 0)
  set(position 0)
  while(TRUE)
    string(SUBSTRING "${text}" ${position} -1 rest)
    string(FIND "${rest}" "\n${fence}" found)
    if(found EQUAL -1)
      break()
    endif()
    math(EXPR start "${position} + ${found} + 1")
    docs_block("${text}" ${start} "${doc}" code)
    set(position ${code_end})

    # The line above the fence, and the page's line number of the first line of code.
    math(EXPR head_length "${start} - 1")
    string(SUBSTRING "${text}" 0 ${head_length} head)
    string(FIND "${head}" "\n" line_start REVERSE)
    math(EXPR line_start "${line_start} + 1")
    string(SUBSTRING "${head}" ${line_start} -1 marker)
    string(REGEX MATCHALL "\n" newlines "${head}")
    list(LENGTH newlines line)
    math(EXPR line "${line} + 3")

    if(marker MATCHES "^<!-- verbatim: ")
      continue()  # the file compiles with its own target; a test compares the two
    endif()
    set(context none)
    if(marker MATCHES "^<!-- snippet: ([a-z_]+) -->$")
      set(context ${CMAKE_MATCH_1})
    endif()
    math(EXPR count "${count} + 1")

    string(REGEX MATCHALL "\n#include [^\n]*" block_includes "\n${code}")
    string(REGEX REPLACE "\n#(include|pragma once)[^\n]*" "\n" code "\n${code}")
    string(SUBSTRING "${code}" 1 -1 code)
    foreach(include IN LISTS block_includes)
      if(context MATCHES "^distributed")
        string(APPEND mpi_includes "${include}")
      else()
        string(APPEND includes "${include}")
      endif()
    endforeach()

    set(block "\n")
    if(context MATCHES "^distributed")
      string(APPEND block "#if XTGRAD_HAVE_MPI\n")
    endif()
    string(APPEND block "namespace docs_snippet_${line} {\nusing namespace xtgrad;\n")
    if(context STREQUAL "toplevel")
      string(APPEND block "#line ${line} \"${doc}\"\n${code}")
    else()
      string(APPEND block "using namespace docs_context::${context};\nvoid body() {\n"
                          "#line ${line} \"${doc}\"\n${code}}\n")
    endif()
    string(APPEND block "}  // namespace docs_snippet_${line}\n")
    if(context MATCHES "^distributed")
      string(APPEND block "#endif\n")
    endif()
    string(APPEND blocks "${block}")
  endwhile()

  string(CONCAT out "// The C++ blocks of ${doc} (${count} compiled here), extracted by\n"
         "// tests/docs/snippets.cmake. Compiled by the target docs_snippets, never run.\n"
         "#include \"snippet_context.hpp\"${includes}\n")
  if(NOT mpi_includes STREQUAL "")
    string(APPEND out "#if XTGRAD_HAVE_MPI${mpi_includes}\n#endif\n")
  endif()
  string(APPEND out "${blocks}")
  set(path "${OUTPUT_DIR}/${name}.cpp")
  set(old "")
  if(EXISTS "${path}")
    file(READ "${path}" old)
  endif()
  if(NOT old STREQUAL out)
    file(WRITE "${path}" "${out}")
  endif()
endforeach()
