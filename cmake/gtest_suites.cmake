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
# 2026-12-04 it had not ended when the other 98 suites had, after 118 s; and a
# suite of 40 to 60 s left unlisted started among the last and ran on alone.
# Seconds as CI's Debian 12 leg measured them on a 2-core AMD EPYC (`ctest
# -j2`, 2026-12-07, commands on the fork server; SlurmCluster with the local
# Slurm cluster, which it mostly waits on; where there is none it skips at
# once); a suite not listed costs 0 and keeps its place.
set(suite_costs SlurmCluster=149 CliContract=78 Figures=77 SlurmGrid=48 Translation=44 Fuzz=40 DataParallel=33
    Probe=24 Decoder=23 EncoderDecoder=23 Bench=22 Cli=21 CompareCli=19 HeadScale=16 QkNorm=16 Signals=15
    ExitCodes=13 StickBreaking=12 LogitScale=11 ForkServer=11 EarlyChecks=10)

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
        list(APPEND costed "${suite}")
      endif()
    endforeach()
    string(APPEND content
      "add_test([==[${suite}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
      "set_tests_properties([==[${suite}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIR}]==] "
      "TIMEOUT ${TIMEOUT} COST ${cost})\n")
    math(EXPR suites "${suites} + 1")
  endif()
endforeach()
# A renamed or removed suite would leave its cost behind unseen.
foreach(entry IN LISTS suite_costs)
  string(REGEX REPLACE "=.*" "" name "${entry}")
  list(FIND costed "${name}" found)  # (IN_LIST needs a policy that cmake -P leaves off)
  if(found EQUAL -1)
    message(WARNING "cmake/gtest_suites.cmake: suite_costs names ${name}, which ${TEST_EXECUTABLE} does not have")
  endif()
endforeach()
if(suites EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests listed no test suite")
endif()
file(WRITE "${CTEST_FILE}.tmp" "${content}")
file(RENAME "${CTEST_FILE}.tmp" "${CTEST_FILE}")
