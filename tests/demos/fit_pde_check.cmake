# fit_pde as a test (run with -DFIT_PDE=<exe>): trains with its defaults for
# each activation and reads the printed "max error" against sin(pi x). The
# bound is loose on purpose: a correct engine lands near 1e-4.
foreach(activation silu tanh)
  execute_process(COMMAND ${FIT_PDE} --activation ${activation} --seed 1
    RESULT_VARIABLE code OUTPUT_VARIABLE output ERROR_VARIABLE error)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "fit_pde --activation ${activation} failed (${code}):\n${output}\n${error}")
  endif()
  if(NOT output MATCHES "max error ([0-9.eE+-]+)")
    message(FATAL_ERROR "fit_pde printed no max error:\n${output}")
  endif()
  set(max_error ${CMAKE_MATCH_1})
  execute_process(COMMAND awk "BEGIN { exit !(${max_error} < 1e-2) }" RESULT_VARIABLE below)
  if(NOT below EQUAL 0)
    message(FATAL_ERROR "fit_pde --activation ${activation}: max error ${max_error}, expected below 1e-2:\n${output}")
  endif()
  message(STATUS "fit_pde --activation ${activation}: max error ${max_error}")
endforeach()
