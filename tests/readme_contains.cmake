# Fails unless README contains the whole text of SOURCE.
file(READ ${README} readme)
file(READ ${SOURCE} source)
string(FIND "${readme}" "${source}" position)
if(position EQUAL -1)
  message(FATAL_ERROR "README.md does not contain ${SOURCE} verbatim: paste the file into the quick-start block")
endif()
