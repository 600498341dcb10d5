# Runs EXE with ARGS ('|'-separated) and checks its exit code is EXPECT_RC and, when given, that
# its stderr matches the regular expression EXPECT_STDERR. For CTest checks of usage errors.
#   cmake -DEXE=path -DARGS="bench|--bad" -DEXPECT_RC=2 -DEXPECT_STDERR=regex -P check_exit_code.cmake
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND "${EXE}" ${_args}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT "${_rc}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got '${_rc}'\nstdout:\n${_out}\nstderr:\n${_err}")
endif()
if(DEFINED EXPECT_STDERR AND NOT _err MATCHES "${EXPECT_STDERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_STDERR}':\n${_err}")
endif()
message(STATUS "exit code ${_rc} as expected:\n${_err}")
