#!/usr/bin/env bash
# Stops the test cluster and removes what start.sh made: every process in the nodes' network
# namespaces (slurmd, step daemons, whatever jobs left running there, as a host's power-off
# would), slurmctld, the namespaces, the bridge and its links, the CPU groups (lhtc-*) and the
# /etc/hosts block. Logs and
# state in $TESTCLUSTER_DIR stay to be read (start.sh wipes them). munged is left running: it is
# shared and harmless. Safe to run when nothing, or only part of it, is running.
set -euo pipefail
DIR=${TESTCLUSTER_DIR:-/var/tmp/lamarckian-testcluster}
MARK=lamarckian-testcluster
LINK_PREFIX=lhtc-
CPU_CGROUP_ROOT=${TESTCLUSTER_CPU_CGROUP_ROOT:-/sys/fs/cgroup/cpu}

fail() { echo "stop.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root (the cluster's daemons, namespaces and /etc/hosts need it)"
command -v ip >/dev/null || fail "ip not found (iproute2)"

# Ours: namespaces nodeK whose eth0 start.sh marked, or that it recorded in $DIR (an interrupted
# start may have made the namespace but not its link yet).
namespaces=()
for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    [[ "$ns" =~ ^node[0-9]+$ ]] || continue
    if [ -d "$DIR/nodes/$ns" ] || ip -n "$ns" link show eth0 2>/dev/null | grep -q "alias $MARK"; then
        namespaces+=("$ns")
    fi
done

cluster_pids() {
    local ns pidfile pid
    for ns in "${namespaces[@]}"; do ip netns pids "$ns" 2>/dev/null || true; done
    # slurmctld, and any slurmd started outside the namespaces; a stale pid file's pid may have
    # been reused by another program.
    # Whatever is left in the CPU groups (a learner that joined lhtc-learner runs in node1's
    # namespace and is listed above already).
    cat "$CPU_CGROUP_ROOT/$LINK_PREFIX"*/cgroup.procs 2>/dev/null || true
    for pidfile in "$DIR"/ctld/slurmctld.pid "$DIR"/nodes/*/slurmd.pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == slurm* ]] && echo "$pid"
    done
    return 0
}
alive() {
    local pid
    for pid in $(cluster_pids | sort -un); do
        # A zombie is dead for this purpose, however long its parent takes to reap it.
        [[ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" =~ ^[^ZX]$ ]] && echo "$pid"
    done
    return 0
}
# TERM first, so that daemons and job processes may clean up; KILL what is left after 5 s. Step
# daemons (slurmstepd) ignore TERM, so they get KILL at once.
for signal in TERM KILL; do
    for ((i = 0; i < 50; i++)); do
        pids=$(alive)
        [ -n "$pids" ] || break
        # Repeated, as job processes may start others meanwhile.
        if [ "$signal" = KILL ] || [ "$i" = 0 ]; then
            kill "-$signal" $pids 2>/dev/null || true
            for pid in $pids; do
                [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != slurmstepd ] || kill -KILL "$pid" 2>/dev/null || true
            done
        fi
        sleep 0.1
    done
done
[ -z "$(alive)" ] || echo "stop.sh: processes still alive: $(alive | tr '\n' ' ')" >&2

for ns in "${namespaces[@]}"; do
    ip netns del "$ns" 2>/dev/null || true
done
# The bridge and the outer ends of the veths (the inner ends go with their namespaces).
for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$LINK_PREFIX" || true); do
    ip link del "$link" 2>/dev/null || true
done

# The CPU groups: empty now, unless a process outlived its KILL; it goes back to the root group.
for group in "$CPU_CGROUP_ROOT/$LINK_PREFIX"*/; do
    [ -d "$group" ] || continue
    for pid in $(cat "$group/cgroup.procs" 2>/dev/null); do
        echo "$pid" > "$CPU_CGROUP_ROOT/cgroup.procs" 2>/dev/null || true
    done
    rmdir "$group" 2>/dev/null || echo "stop.sh: could not remove CPU group $group" >&2
done

if grep -q "# $MARK begin" /etc/hosts 2>/dev/null; then
    hosts=$(sed "/# $MARK begin/,/# $MARK end/d" /etc/hosts)
    printf '%s\n' "$hosts" > /etc/hosts
fi
echo "test cluster stopped"
