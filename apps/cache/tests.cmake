# ddss-cache (apps/cache): short runs whose exit status is the freshness check (every
# request is checked against the newest version the back-end finished before it began).
# Updates every 300 us so documents change while they are being served.
set(cache_test_args --requests 200 --compute 0,2 --update-us 300)
ddss_rank_test(NAME cache_demo_tcp TARGET ddss-cache RANKS 3 TRANSPORT tcp
               LABELS integration TIMEOUT 60 ARGS ${cache_test_args})
ddss_rank_test(NAME cache_demo_daemon_tcp TARGET ddss-cache RANKS 3 CLIENTS 1 TRANSPORT tcp
               LABELS integration TIMEOUT 60 ARGS ${cache_test_args})
# The check can fail: with --no-version-check the front-ends serve their own copies without
# asking, and the run must report stale serves (it then exits 1; the test passes only on
# the report, whatever the status).
ddss_rank_test(NAME cache_stale_caught_tcp TARGET ddss-cache RANKS 3 TRANSPORT tcp
               LABELS integration TIMEOUT 60 ARGS ${cache_test_args} --no-version-check)
set_tests_properties(cache_stale_caught_tcp PROPERTIES
  PASS_REGULAR_EXPRESSION "stale serves: [1-9][0-9]*, .* -> FAILED")
