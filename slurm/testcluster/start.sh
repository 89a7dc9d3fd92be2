#!/usr/bin/env bash
# Starts a Slurm cluster of N simulated nodes (node1..nodeN) on this machine, then waits until
# `sinfo` shows N idle nodes. Run install.sh first, as root. Writes $TESTCLUSTER_DIR/env, which
# exports SLURM_CONF for Slurm's clients and the tests:
#   slurm/testcluster/start.sh 4 && source /var/tmp/lamarckian-testcluster/env
# Every node is apart from the others as a host is: its own network namespace `nodeK` (its own
# loopback, address 10.217.0.K on eth0, a link to a bridge in this namespace) and its own UTS
# namespace (`hostname` is nodeK). slurmctld stays here, on the bridge's address 10.217.0.254.
# The file system stays shared, as a cluster's home and scratch are. See README.md.
# Three partitions: `debug` (the default) holds every node; `learner` holds the first
# TESTCLUSTER_LEARNER_NODES nodes, each declaring one GPU in Slurm's GRES (Gres=gpu:1, no device:
# gres.conf beside slurm.conf has no File=), so a job with --gpus-per-node=1 runs there; `cpu` holds
# the others (the last node when there are none, so that both exist at every size). The env file
# names them (TESTCLUSTER_LEARNER_PARTITION, TESTCLUSTER_CPU_PARTITION, TESTCLUSTER_LEARNER_NODES,
# TESTCLUSTER_GPU_REQUEST).
#   TESTCLUSTER_LEARNER_NODES=1        how many nodes (node1..) form the learner partition, 1..N
#   TESTCLUSTER_SUBNET=10.217.0.0/24   the nodes' /24 (.1..N nodes, .254 the bridge)
#   TESTCLUSTER_LINK_RATE=1gbit        limit every node's link in both directions (tc tbf)
#   TESTCLUSTER_NODE_CPUS=0.5          every node's own cores (a CFS quota, cgroup lhtc-nodeK); unset: none
#   TESTCLUSTER_CPU_QUOTA_SCOPE=actors what the quota holds: `actors` (only processes that join it) or
#                                      `node` (slurmd and all it starts; see README.md)
#   TESTCLUSTER_LEARNER_CPUS=1         the learner's own cores (cgroup lhtc-learner); unset: none
#   TESTCLUSTER_CPU_PERIOD_US=100000   the quotas' CFS period in microseconds (1000..1000000); a shorter
#                                      one (10000) throttles a group for at most that long at a time
#   TESTCLUSTER_CPU_SHARES=8192        the quota groups' cpu.shares (kernel default 1024): on a machine busy
#                                      with other work, higher shares let each group have its quota
# Starting again stops the running cluster first (stop.sh), so it restarts cleanly.
set -euo pipefail
NUM_NODES=${1:-4}
DIR=${TESTCLUSTER_DIR:-/var/tmp/lamarckian-testcluster}
SUBNET=${TESTCLUSTER_SUBNET:-10.217.0.0/24}
LINK_RATE=${TESTCLUSTER_LINK_RATE:-}
CTLD_PORT=${TESTCLUSTER_CTLD_PORT:-6817}
NODE_PORT=${TESTCLUSTER_NODE_PORT:-6818}
CPUS=${TESTCLUSTER_CPUS_PER_NODE:-$(nproc --all)}
NODE_CPUS=${TESTCLUSTER_NODE_CPUS:-}
QUOTA_SCOPE=${TESTCLUSTER_CPU_QUOTA_SCOPE:-actors}
LEARNER_CPUS=${TESTCLUSTER_LEARNER_CPUS:-}
CPU_PERIOD=${TESTCLUSTER_CPU_PERIOD_US:-100000}
CPU_SHARES=${TESTCLUSTER_CPU_SHARES:-}
CPU_CGROUP_ROOT=${TESTCLUSTER_CPU_CGROUP_ROOT:-/sys/fs/cgroup/cpu}
LEARNER_NODES=${TESTCLUSTER_LEARNER_NODES:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# Interface names in this namespace; stop.sh removes every link with this prefix.
LINK_PREFIX=lhtc-
BRIDGE=${LINK_PREFIX}br
MARK=lamarckian-testcluster

fail() { echo "start.sh: $*" >&2; exit 1; }
if ! [[ "$NUM_NODES" =~ ^[1-9][0-9]?$ ]]; then
    echo "start.sh: number of nodes must be 1..99, got '$NUM_NODES'" >&2
    exit 2
fi
[[ "$LEARNER_NODES" =~ ^[1-9][0-9]?$ ]] && [ "$LEARNER_NODES" -le "$NUM_NODES" ] \
    || fail "TESTCLUSTER_LEARNER_NODES must be a count of nodes from 1 to $NUM_NODES, got '$LEARNER_NODES'"
[ "$(id -u)" = 0 ] || fail "run as root (network namespaces, slurmd and /etc/hosts need it)"
[[ "$SUBNET" =~ ^([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})\.0/24$ ]] \
    || fail "TESTCLUSTER_SUBNET must be a /24 written A.B.C.0/24, got '$SUBNET'"
NET=${BASH_REMATCH[1]}
BRIDGE_ADDR=$NET.254
# Fractional cores as a CFS quota in microseconds per period of CPU_PERIOD microseconds (the kernel's
# floor is 1 ms for both). A group that spends its quota early in a period waits for the next one:
# with the kernel's default 100 ms period a 0.2-core group runs 20 ms, then is throttled for 80 ms.
[[ "$CPU_PERIOD" =~ ^[0-9]+$ ]] && [ "$CPU_PERIOD" -ge 1000 ] && [ "$CPU_PERIOD" -le 1000000 ] \
    || fail "TESTCLUSTER_CPU_PERIOD_US must be microseconds from 1000 to 1000000, got '$CPU_PERIOD'"
[ -z "$CPU_SHARES" ] || { [[ "$CPU_SHARES" =~ ^[0-9]+$ ]] && [ "$CPU_SHARES" -ge 2 ] && [ "$CPU_SHARES" -le 262144 ]; } \
    || fail "TESTCLUSTER_CPU_SHARES must be an integer from 2 to 262144, got '$CPU_SHARES'"
quota_us() {
    [[ "$2" =~ ^([0-9]+)(\.[0-9]{1,3})?$ ]] || fail "$1 must be cores like 0.1, 0.5 or 2, got '$2'"
    local quota
    quota=$(awk -v cores="$2" -v period="$CPU_PERIOD" 'BEGIN {printf "%d", cores * period + 0.5}')
    [ "$quota" -ge 1000 ] || fail "$1 times TESTCLUSTER_CPU_PERIOD_US must be at least 1000 us (the kernel's floor), got $quota us"
    echo "$quota"
}
NODE_QUOTA= LEARNER_QUOTA=
[ -z "$NODE_CPUS" ] || NODE_QUOTA=$(quota_us TESTCLUSTER_NODE_CPUS "$NODE_CPUS")
[ -z "$LEARNER_CPUS" ] || LEARNER_QUOTA=$(quota_us TESTCLUSTER_LEARNER_CPUS "$LEARNER_CPUS")
[[ "$QUOTA_SCOPE" == node || "$QUOTA_SCOPE" == actors ]] \
    || fail "TESTCLUSTER_CPU_QUOTA_SCOPE must be node or actors, got '$QUOTA_SCOPE'"
if [ -n "$NODE_QUOTA$LEARNER_QUOTA" ] && [ ! -f "$CPU_CGROUP_ROOT/cpu.cfs_quota_us" ]; then
    fail "CPU quotas need cgroup v1's cpu controller at $CPU_CGROUP_ROOT (no cpu.cfs_quota_us there); set TESTCLUSTER_CPU_CGROUP_ROOT"
fi
programs=(munged munge slurmctld slurmd sinfo ip nsenter unshare)
[ -z "$LINK_RATE" ] || programs+=(tc python3)
for program in "${programs[@]}"; do
    command -v "$program" >/dev/null || fail "$program not found; run install.sh first"
done

# Refused before anything running is stopped; the running cluster's own bridge is no clash.
clash=$(ip -4 route show to match "$NET.1" | grep -v -e '^default' -e " dev $BRIDGE " || true)
[ -z "$clash" ] || fail "subnet $SUBNET is already in use here ($(head -1 <<<"$clash")); pick another with TESTCLUSTER_SUBNET"

"$HERE/stop.sh" >/dev/null
rm -rf "$DIR"
mkdir -p "$DIR/ctld"

# The network: a bridge here, and per node a namespace with a veth pair whose outer end is a bridge
# port. The default route via the bridge makes "which address reaches the others" probes (a UDP
# connect to any address) answer with the node's own address, as on a host with one network card.
ip link add "$BRIDGE" type bridge
ip addr add "$BRIDGE_ADDR/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
addrs=()
for ((k = 1; k <= NUM_NODES; k++)); do
    node=node$k addr=$NET.$k outer=${LINK_PREFIX}n$k
    addrs+=("$addr")
    mkdir -p "$DIR/nodes/$node/tmp"
    ip netns add "$node"
    ip link add "$outer" type veth peer name "${LINK_PREFIX}i$k"
    ip link set "${LINK_PREFIX}i$k" netns "$node"
    ip -n "$node" link set "${LINK_PREFIX}i$k" name eth0
    ip -n "$node" link set eth0 alias "$MARK"
    ip -n "$node" addr add "$addr/24" dev eth0
    ip -n "$node" link set lo up
    ip -n "$node" link set eth0 up
    ip -n "$node" route add default via "$BRIDGE_ADDR"
    ip link set "$outer" master "$BRIDGE" up
done
if [ -n "$LINK_RATE" ]; then
    # benchmarks/scale/netem.py's shaper, on both ends of each link: the node's egress inside its
    # namespace, its ingress on the bridge port.
    PYTHONPATH="$REPO/benchmarks" python3 - "$LINK_RATE" "$NUM_NODES" "$LINK_PREFIX" <<'EOF'
import sys
import netem
rate, count, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for k in range(1, count + 1):
    netem._shaper("ip", "netns", "exec", f"node{k}", device="eth0", rate=rate)
    netem._shaper(device=f"{prefix}n{k}", rate=rate)
EOF
fi

# A host's own cores: a cgroup per node (and one for the learner) with a CFS quota. stop.sh removes
# them. In scope `node`, start-node puts the node's slurmd in its group, so the node's job steps,
# Ray daemons and actors inherit it; in scope `actors`, the group holds only the processes that
# join it (lamarckian_hpc.runtime.placement.cpu_quota.join_cpu_group, through the variable the task prolog sets).
make_cpu_group() {
    local group=$CPU_CGROUP_ROOT/${LINK_PREFIX}$1
    mkdir -p "$group"
    echo "$CPU_PERIOD" > "$group/cpu.cfs_period_us"
    echo "$2" > "$group/cpu.cfs_quota_us"
    [ -z "$CPU_SHARES" ] || echo "$CPU_SHARES" > "$group/cpu.shares"
}
if [ -n "$NODE_QUOTA" ]; then
    for ((k = 1; k <= NUM_NODES; k++)); do make_cpu_group "node$k" "$NODE_QUOTA"; done
fi
[ -z "$LEARNER_QUOTA" ] || make_cpu_group learner "$LEARNER_QUOTA"
# Slurm passes the submitter's environment to a job, not slurmd's: a task prolog (run by every
# step's slurmstepd before each task, with SLURMD_NODENAME set) names the groups for the task.
{
    echo "#!/bin/sh"
    echo "# Written by start.sh: names the test cluster's CPU groups in every task's environment."
    if [ -n "$NODE_QUOTA" ] && [ "$QUOTA_SCOPE" = actors ]; then
        echo "echo \"export LAMARCKIAN_HPC_CPU_CGROUP=$CPU_CGROUP_ROOT/${LINK_PREFIX}\$SLURMD_NODENAME\""
    fi
    [ -z "$LEARNER_QUOTA" ] || echo "echo \"export LAMARCKIAN_HPC_LEARNER_CPU_CGROUP=$CPU_CGROUP_ROOT/${LINK_PREFIX}learner\""
    echo "exit 0"
} > "$DIR/task-prolog"
chmod +x "$DIR/task-prolog"

# Node names in a marked block of /etc/hosts (rewritten in place, because /etc/hosts is often a
# bind mount that cannot be replaced by rename).
hosts=$(sed "/# $MARK begin/,/# $MARK end/d" /etc/hosts)
{
    printf '%s\n' "$hosts"
    echo "# $MARK begin"
    for ((k = 1; k <= NUM_NODES; k++)); do echo "$NET.$k node$k"; done
    echo "# $MARK end"
} > "$DIR/hosts"
cat "$DIR/hosts" > /etc/hosts

join() { local IFS=,; echo "$*"; }
# Slurm's host list of nodes first..last: node3, node[1-4].
hostlist() { if [ "$1" = "$2" ]; then echo "node$1"; else echo "node[$1-$2]"; fi; }
# The NodeName line of nodes first..last (their addresses in order), with extra options.
node_line() {
    local names
    names=$(hostlist "$1" "$2")
    echo "NodeName=$names NodeHostname=$names NodeAddr=$(join "${addrs[@]:$(($1 - 1)):$(($2 - $1 + 1))}")${3:+ $3}"
}
# The learner nodes declare one GPU each: Gres=gpu:1 in slurm.conf, and in gres.conf (which Slurm
# reads from slurm.conf's directory) a GPU whose File= is a stand-in device node, $DIR/gpu/nvidia0,
# a character device 1,3 as /dev/null is. Slurm 22.05 drops a GPU without File= ("Removing file-less
# GPU gpu:(null) from final GRES list"; the node is then INVAL with "gres/gpu count reported lower
# than configured (0 < 1)"), and names a regular file "not a valid character or block device" (it
# still counts it: the fallback where mknod is not allowed). Nothing opens the file: TaskPlugin is
# task/none, so no cgroup restricts devices. AutoDetect=off: no NVIDIA library is asked. The cpu
# partition is the other nodes, or the last node when every node is a learner node.
LEARNER_LIST=$(hostlist 1 "$LEARNER_NODES")
node_lines=$(node_line 1 "$LEARNER_NODES" Gres=gpu:1)
if [ "$LEARNER_NODES" -lt "$NUM_NODES" ]; then
    node_lines="$node_lines\n$(node_line $((LEARNER_NODES + 1)) "$NUM_NODES")"
    CPU_LIST=$(hostlist $((LEARNER_NODES + 1)) "$NUM_NODES")
else
    CPU_LIST=$(hostlist "$NUM_NODES" "$NUM_NODES")
fi
GPU_REQUEST=--gpus-per-node=1
mkdir -p "$DIR/gpu"
mknod -m 666 "$DIR/gpu/nvidia0" c 1 3 2>/dev/null || : > "$DIR/gpu/nvidia0"
{
    echo "# Written by start.sh: the learner nodes' GPU, for Slurm's bookkeeping only (there is no GPU)."
    echo "AutoDetect=off"
    echo "NodeName=$LEARNER_LIST Name=gpu File=$DIR/gpu/nvidia0"
} > "$DIR/gres.conf"
sed -e "s|@HOST@|$(hostname -s)|g" -e "s|@BRIDGE_ADDR@|$BRIDGE_ADDR|g" -e "s|@CTLD_PORT@|$CTLD_PORT|g" \
    -e "s|@DIR@|$DIR|g" -e "s|@NUM_NODES@|$NUM_NODES|g" -e "s|@NODE_LINES@|$node_lines|" \
    -e "s|@LEARNER_NODES@|$LEARNER_LIST|g" -e "s|@CPU_NODES@|$CPU_LIST|g" -e "s|@NODE_PORT@|$NODE_PORT|g" \
    -e "s|@CPUS@|$CPUS|g" -e "s|@TASK_PROLOG@|$DIR/task-prolog|g" \
    "$HERE/slurm.conf.in" > "$DIR/slurm.conf"
export SLURM_CONF="$DIR/slurm.conf"
{
    echo "export SLURM_CONF=$SLURM_CONF"
    # PyPI's mpich speaks PMI-1 to Slurm's pmi2 plugin, whose reader splits request lines longer
    # than 1 KiB; the UCX netmod's addresses come close to that and now and then exceed it
    # ("mpi/pmi2: value not properly terminated in client request", MPI_Init fails). The OFI
    # netmod's TCP addresses are about 100 bytes.
    echo "export MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp"
    echo "export TESTCLUSTER_NODE_ADDRS=$(join "${addrs[@]}") TESTCLUSTER_BRIDGE_ADDR=$BRIDGE_ADDR"
    echo "export TESTCLUSTER_LEARNER_PARTITION=learner TESTCLUSTER_CPU_PARTITION=cpu TESTCLUSTER_LEARNER_NODES='$LEARNER_LIST' TESTCLUSTER_GPU_REQUEST=$GPU_REQUEST"
    echo "export TESTCLUSTER_NODE_CPUS=$NODE_CPUS TESTCLUSTER_CPU_QUOTA_SCOPE=$QUOTA_SCOPE TESTCLUSTER_LEARNER_CPUS=$LEARNER_CPUS TESTCLUSTER_CPU_PERIOD_US=$CPU_PERIOD TESTCLUSTER_CPU_SHARES=$CPU_SHARES"
} > "$DIR/env"

# One node's slurmd in that node's namespaces, also for bringing back a node that was killed.
# Not `ip netns exec`: it remounts /sys, and slurmd then stops with "No filesystem mounted on
# /sys/fs/cgroup". slurmd daemonizes; its job steps inherit both namespaces, and its CPU group.
join_node_group=
if [ -n "$NODE_QUOTA" ] && [ "$QUOTA_SCOPE" = node ]; then
    group="$CPU_CGROUP_ROOT/${LINK_PREFIX}\$1"
    join_node_group="[ -d \"$group\" ] || { echo \"start-node: no CPU group $group\" >&2; exit 1; }
echo \$\$ > \"$group/cgroup.procs\""
fi
cat > "$DIR/start-node" <<EOF
#!/bin/sh
# Starts the slurmd of one test-cluster node in its own network and UTS namespaces (and, when the
# cluster has per-node quotas on whole nodes, in its CPU group): start-node nodeK
set -eu
[ -e "/run/netns/\$1" ] || { echo "start-node: no network namespace \$1" >&2; exit 1; }
$join_node_group
exec nsenter --net="/run/netns/\$1" unshare --uts sh -c 'hostname "\$1" && exec slurmd -f "\$2" -N "\$1"' sh "\$1" "$SLURM_CONF"
EOF
chmod +x "$DIR/start-node"

if ! munge -n >/dev/null 2>&1 </dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    # munged outlives the cluster (stop.sh leaves it): it must not inherit this script's open files,
    # among them the descriptor of a caller's `flock /tmp/testcluster.lock`, which would hold that
    # lock for as long as munged runs and leave every later flock waiting.
    closes=()
    for fd in /proc/$$/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] && closes+=("$fd>&-")
    done
    eval "runuser -u munge -- /usr/sbin/munged ${closes[*]}"
fi
slurmctld -f "$SLURM_CONF"
for ((k = 1; k <= NUM_NODES; k++)); do
    "$DIR/start-node" "node$k"
done

for ((i = 0; i < 120; i++)); do
    # Exactly "idle": "idle*" is a node that was idle and stopped answering.
    idle=$(sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle" {print $1}' | sort -u | wc -l)
    if [ "$idle" -ge "$NUM_NODES" ]; then
        quota=""
        [ -z "$NODE_CPUS" ] || quota="; $NODE_CPUS cores each (scope $QUOTA_SCOPE)"
        [ -z "$LEARNER_CPUS" ] || quota="$quota; learner $LEARNER_CPUS cores"
        [ -z "$NODE_CPUS$LEARNER_CPUS" ] || quota="$quota; CFS period $CPU_PERIOD us"
        echo "test cluster up: $NUM_NODES idle nodes at $NET.1-$NUM_NODES$quota; source $DIR/env"
        exit 0
    fi
    sleep 0.5
done
echo "start.sh: only $idle of $NUM_NODES nodes idle after 60 s; see $DIR/ctld/slurmctld.log and $DIR/nodes/*/slurmd.log" >&2
sinfo -N >&2 || true
exit 1
