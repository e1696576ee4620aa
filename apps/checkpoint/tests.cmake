# ddss-checkpoint: the program checks every rollback (each process its restored state, the
# coordinator every process's checkpoint) and its final state, and exits non-zero on any
# mismatch. Short runs, direct and daemon mode.
ddss_rank_test(NAME demo_checkpoint_tcp TARGET ddss-checkpoint RANKS 4 TRANSPORT tcp
               LABELS integration TIMEOUT 120
               ARGS --steps 600 --restarts 8 --interval 10 --keep 8 --seed 7)
ddss_rank_test(NAME demo_checkpoint_daemon_tcp TARGET ddss-checkpoint RANKS 4 CLIENTS 1
               TRANSPORT tcp LABELS integration TIMEOUT 120
               ARGS --steps 600 --restarts 8 --interval 10 --keep 8 --seed 7)
