# Registers one CTest test per GoogleTest suite of a test binary.
#
# Run after each build of the binary (cmake -P, see CMakeLists.txt). It lists
# the binary's tests and writes CTEST_FILE, which CTest includes: one add_test
# per suite, running that suite's tests in one process with --gtest_filter.
# One process per test would start LibTorch ~400 times, about a second each;
# per suite the suite's tests share one start. A failure still names the test
# in GoogleTest's output ("[  FAILED  ] Suite.Test").
#
# Inputs: TEST_EXECUTABLE, CTEST_FILE, WORKING_DIR, TIMEOUT (seconds per suite).
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
                WORKING_DIRECTORY "${WORKING_DIR}"
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${status}): ${errors}")
endif()

# The longest suites, started first when ctest runs in parallel (CTest runs
# tests in descending COST until its own timings, kept in the build directory,
# replace these). Started in listing order, the longest (CliContract, listed
# late) began last and held up the whole run: on a 16-core GPU machine on
# 2026-12-04 it had not ended when the other 98 suites had, after 118 s.
# Seconds as measured there with 16 suites side by side (CliContract's on
# 2026-11-28), and SlurmCluster's on a 2-core CPU with a local Slurm cluster
# (2026-11-28; where there is none it skips at once); a suite not listed
# costs 0 and keeps its place.
set(suite_costs SlurmCluster=258 CliContract=100 Figures=85 Fuzz=72 Outputs=45 SlurmGrid=44 WriteFailure=39
    Cli=38 EncoderDecoder=36 Signals=33 Bench=31 Probe=30 Translation=28 ExitCodes=28 Heads=26)

# A suite line is unindented and ends its name with a dot ("Golden." or
# "Registry/EveryScheme.  # TypeParam ..."); its tests follow, indented.
string(REPLACE "\n" ";" lines "${listing}")
set(content "# Written by cmake/gtest_suites.cmake after each build of ${TEST_EXECUTABLE}.\n")
set(suites 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.")
    set(suite "${CMAKE_MATCH_1}")
    set(cost 0)
    foreach(entry IN LISTS suite_costs)
      if(entry MATCHES "^${suite}=([0-9]+)$")
        set(cost "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    string(APPEND content
      "add_test([==[${suite}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
      "set_tests_properties([==[${suite}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIR}]==] "
      "TIMEOUT ${TIMEOUT} COST ${cost})\n")
    math(EXPR suites "${suites} + 1")
  endif()
endforeach()
if(suites EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests listed no test suite")
endif()
file(WRITE "${CTEST_FILE}.tmp" "${content}")
file(RENAME "${CTEST_FILE}.tmp" "${CTEST_FILE}")
