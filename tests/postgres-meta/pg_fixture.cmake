# One throwaway PostgreSQL 15 for the whole ctest run (tests/support/pg_test_server.sh),
# shared by tests/postgres-meta and tests/conformance through the fixture `sluice_pg`.
# The ports come from the build directory's path, so two checkouts (a clone in CI, a
# worktree, the sanitized build) run their suites side by side, and a server that a killed
# run left behind in one does not make another's start fail with "Address already in use".
# 20000-27999: below Linux's ephemeral range (32768-60999).
string(MD5 _sluice_pg_hash "${CMAKE_BINARY_DIR}")
string(SUBSTRING "${_sluice_pg_hash}" 0 4 _sluice_pg_hash)
math(EXPR _sluice_pg_port "20000 + (0x${_sluice_pg_hash} % 4000) * 2")
math(EXPR _sluice_pg_port2 "${_sluice_pg_port} + 1")
set(SLUICE_TEST_PG_PORT ${_sluice_pg_port} CACHE STRING "Port of the throwaway PostgreSQL for tests")
set(SLUICE_TEST_PG_PORT2 ${_sluice_pg_port2} CACHE STRING "Port of the second (restartable) test PostgreSQL")
set(SLUICE_TEST_PG_DIR ${CMAKE_BINARY_DIR}/pg-test CACHE PATH "Directory of the test PostgreSQL")
set(SLUICE_TEST_PG_SCRIPT ${CMAKE_SOURCE_DIR}/tests/support/pg_test_server.sh)
set(SLUICE_TEST_PG_URL "host=127.0.0.1 port=${SLUICE_TEST_PG_PORT} user=postgres dbname=sluice_test")
# One variable only (gtest_discover_tests does not carry list-valued properties); the
# second server's script, directory and port are compile definitions of the test binary.
set(SLUICE_TEST_PG_ENV "SLUICE_TEST_PG_URL=${SLUICE_TEST_PG_URL}")
# The variables above are set in every including directory; the fixture tests only once.
include_guard(GLOBAL)
add_test(NAME sluice_pg_start COMMAND ${SLUICE_TEST_PG_SCRIPT} start ${SLUICE_TEST_PG_DIR} ${SLUICE_TEST_PG_PORT})
set_tests_properties(sluice_pg_start PROPERTIES FIXTURES_SETUP sluice_pg TIMEOUT 120)
add_test(NAME sluice_pg_stop COMMAND ${SLUICE_TEST_PG_SCRIPT} stop ${SLUICE_TEST_PG_DIR})
set_tests_properties(sluice_pg_stop PROPERTIES FIXTURES_CLEANUP sluice_pg TIMEOUT 120)
