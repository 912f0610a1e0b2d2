# Fails unless the page README (the README or a page of docs/) contains the
# whole text of SOURCE: the block after <!-- verbatim: SOURCE --> is meant to
# be that file, verbatim. SOURCE is given as an absolute path.
file(READ ${README} readme)
file(READ ${SOURCE} source)
string(FIND "${readme}" "${source}" position)
if(position EQUAL -1)
  message(FATAL_ERROR "${README} does not contain ${SOURCE} verbatim: paste the file into the "
                      "code block after its <!-- verbatim: ... --> line")
endif()
