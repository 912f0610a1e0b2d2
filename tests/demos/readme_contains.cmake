# Fails unless README contains the whole text of SOURCE (the block after
# <!-- MARKER --> is meant to be that file, verbatim).
file(READ ${README} readme)
file(READ ${SOURCE} source)
string(FIND "${readme}" "${source}" position)
if(position EQUAL -1)
  message(FATAL_ERROR "README.md does not contain ${SOURCE} verbatim: paste the file into the "
                      "code block after <!-- ${MARKER} -->")
endif()
