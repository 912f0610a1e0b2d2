# Doxygen's INPUT_FILTER for xtgrad's headers, whose comments are plain //
# comments written to be read in the header: it hands them to Doxygen as
# documentation without changing the headers.
#  * The comment block right after #pragma once documents the file (the
#    #pragma once line becomes "/// @file").
#  * A comment line at namespace or class level (indented by at most two
#    spaces) documents what follows it; a // comment after a member or an
#    enumerator on its own line documents that member (///<). Comments
#    inside function bodies (indented deeper) stay comments.
#  * Comment lines indented further than their paragraph (formulas, shapes,
#    file layouts) are kept as they are written, as a Markdown code block
#    (after an empty line, added when there is none; Doxygen's line numbers
#    are off by those lines, which is why the reference has no source
#    browser), except the lines of a "*" or "-" list. In the other lines a
#    backslash or a <word> is escaped, so that "\n" or "<name>" reads as
#    written.
function flush() {
  if (have) print pending
  have = 0
}
function emit(line) {
  flush()
  pending = line
  have = 1
}
function end_verbatim() {
  verbatim = 0
}
function escape(text) {
  gsub(/\\/, "\\\\\\\\", text)
  gsub(/<[a-z][a-z_ ]*>/, "\\\\&", text)
  return text
}
BEGIN { start = 1 }
start && /^#pragma once/ { emit("/// @file"); next }
(start && /^\/\/( |$)/) || /^(  )?\/\/( |$)/ {
  match($0, /\/\//)
  indent = substr($0, 1, RSTART - 1)
  text = substr($0, RSTART + 2)
  sub(/^ /, "", text)
  if (text ~ /^ *$/) {
    end_verbatim(); list = 0
    emit(indent "///")
  } else if (text ~ /^ *[*-] /) {
    end_verbatim(); list = 1
    emit(indent "/// " escape(text))
  } else if (text ~ /^ / && (verbatim || (text ~ /^  / && !list))) {
    if (!verbatim && pending !~ /^ *\/\/\/$/) emit(indent "///")
    verbatim = 1
    emit(indent "///    " text)
  } else {
    end_verbatim()
    if (text !~ /^ /) list = 0
    emit(indent "/// " escape(text))
  }
  next
}
{
  start = 0
  end_verbatim(); list = 0
  if ($0 ~ /^(  )?[^ \/].*[;,] +\/\/ /) {
    match($0, /[;,] +\/\/ /)
    emit(substr($0, 1, RSTART) " ///< " substr($0, RSTART + RLENGTH))
  } else {
    emit($0)
  }
}
END { end_verbatim(); flush() }
