# ddss-reconfig: the program checks that no two agents were ever inside one server's
# critical section (witness), that every server's record matches its move log (no move
# counter used twice, each move starting where the previous one ended) and that every
# loaded site was relieved; it exits non-zero on any failure. --hold-us keeps each move's
# lock longer so agents collide more often.
ddss_rank_test(NAME demo_reconfig_tcp TARGET ddss-reconfig RANKS 4 TRANSPORT tcp
               LABELS integration TIMEOUT 120 ARGS --reps 4 --hold-us 100 --seed 3)
ddss_rank_test(NAME demo_reconfig_daemon_tcp TARGET ddss-reconfig RANKS 4 CLIENTS 1
               TRANSPORT tcp LABELS integration TIMEOUT 120 ARGS --reps 4 --hold-us 100 --seed 3)
