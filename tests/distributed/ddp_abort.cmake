# Runs ddp_abort under mpirun and expects the whole job to fail within
# TIMEOUT seconds (not to hang) with the failing rank's message (with
# MODE kill: with mpirun's report of the killed rank).
# -DMPIEXEC=... -DEXE=... -DNP=... -DFAILING=... -DTIMEOUT=... [-DMODE=ddp|zero|kill|moe]
if(NOT DEFINED MODE)
  set(MODE ddp)
endif()
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np ${NP} ${EXE} ${FAILING} ${MODE}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${TIMEOUT})
message(STATUS "exit: ${result}\n${out}${err}")
if(result STREQUAL "0")
  message(FATAL_ERROR "the job succeeded; expected it to abort")
endif()
if(result MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the job hung: ${result}")
endif()
set(expected "xtgrad rank ${FAILING}: step failed: injected failure in a backward rule")
if(MODE STREQUAL "kill")
  set(expected "signal 9")
endif()
string(FIND "${out}${err}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the output does not contain '${expected}'")
endif()
