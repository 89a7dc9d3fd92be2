#!/usr/bin/env bash
# Stops the test cluster's slurmd and slurmctld (by their pid files) and removes its /etc/hosts
# block. munged is left running: it is shared and harmless.
set -uo pipefail
DIR=${TESTCLUSTER_DIR:-/var/tmp/lamarckian-testcluster}
pids=()
for pidfile in "$DIR"/nodes/*/slurmd.pid "$DIR"/ctld/slurmctld.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" && pids+=("$pid")
    fi
done
for pid in "${pids[@]}"; do
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
done
if grep -q '# lamarckian-testcluster begin' /etc/hosts 2>/dev/null; then
    hosts=$(sed '/# lamarckian-testcluster begin/,/# lamarckian-testcluster end/d' /etc/hosts)
    printf '%s\n' "$hosts" > /etc/hosts
fi
echo "test cluster stopped"
