#!/usr/bin/env bash
# Starts a Slurm cluster of N simulated nodes (node1..nodeN) on this machine: munged, slurmctld
# and one slurmd per node, then waits until `sinfo` shows N idle nodes. Run install.sh first,
# as root. Writes $TESTCLUSTER_DIR/env, which exports SLURM_CONF for Slurm's clients and the tests:
#   slurm/testcluster/start.sh 4 && source /var/tmp/lamarckian-testcluster/env
# Every node gets its own loopback address (127.0.10.K), entered in /etc/hosts, so that code
# which resolves a node's name reaches that node's processes. Starting again restarts cleanly.
set -euo pipefail
NUM_NODES=${1:-4}
DIR=${TESTCLUSTER_DIR:-/var/tmp/lamarckian-testcluster}
CTLD_PORT=${TESTCLUSTER_CTLD_PORT:-6817}
NODE_PORT_BASE=${TESTCLUSTER_NODE_PORT_BASE:-17000}
CPUS=${TESTCLUSTER_CPUS_PER_NODE:-$(nproc)}
HERE=$(cd "$(dirname "$0")" && pwd)
if ! [[ "$NUM_NODES" =~ ^[1-9][0-9]?$ ]]; then
    echo "start.sh: number of nodes must be 1..99, got '$NUM_NODES'" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    echo "start.sh: run as root (slurmd and /etc/hosts need it)" >&2
    exit 1
fi
for program in munged slurmctld slurmd sinfo; do
    command -v "$program" >/dev/null || { echo "start.sh: $program not found; run install.sh first" >&2; exit 1; }
done

"$HERE/stop.sh" >/dev/null 2>&1 || true
rm -rf "$DIR"
mkdir -p "$DIR/ctld"

# Node addresses: 127.0.10.K for nodeK, in a marked block of /etc/hosts (rewritten in place,
# because /etc/hosts is often a bind mount that cannot be replaced by rename).
addrs=() ports=()
for ((k = 1; k <= NUM_NODES; k++)); do
    addrs+=("127.0.10.$k")
    ports+=("$((NODE_PORT_BASE + k))")
    mkdir -p "$DIR/nodes/node$k/tmp"
done
hosts=$(sed '/# lamarckian-testcluster begin/,/# lamarckian-testcluster end/d' /etc/hosts)
{
    printf '%s\n' "$hosts"
    echo "# lamarckian-testcluster begin"
    for ((k = 1; k <= NUM_NODES; k++)); do echo "127.0.10.$k node$k"; done
    echo "# lamarckian-testcluster end"
} > "$DIR/hosts"
cat "$DIR/hosts" > /etc/hosts

join() { local IFS=,; echo "$*"; }
sed -e "s|@HOST@|$(hostname -s)|g" -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@DIR@|$DIR|g" \
    -e "s|@NUM_NODES@|$NUM_NODES|g" -e "s|@NODE_ADDRS@|$(join "${addrs[@]}")|g" \
    -e "s|@NODE_PORTS@|$(join "${ports[@]}")|g" -e "s|@CPUS@|$CPUS|g" \
    "$HERE/slurm.conf.in" > "$DIR/slurm.conf"
export SLURM_CONF="$DIR/slurm.conf"
{
    echo "export SLURM_CONF=$SLURM_CONF"
    # PyPI's mpich speaks PMI-1 to Slurm's pmi2 plugin, whose reader splits request lines longer
    # than 1 KiB; the UCX netmod's addresses come close to that and now and then exceed it
    # ("mpi/pmi2: value not properly terminated in client request", MPI_Init fails). The OFI
    # netmod's TCP addresses are about 100 bytes.
    echo "export MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp"
} > "$DIR/env"

if ! munge -n >/dev/null 2>&1 </dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
fi
slurmctld -f "$SLURM_CONF"
for ((k = 1; k <= NUM_NODES; k++)); do
    slurmd -f "$SLURM_CONF" -N "node$k"
done

for ((i = 0; i < 120; i++)); do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    if [ "$idle" -ge "$NUM_NODES" ]; then
        echo "test cluster up: $NUM_NODES idle nodes; source $DIR/env"
        exit 0
    fi
    sleep 0.5
done
echo "start.sh: only $idle of $NUM_NODES nodes idle after 60 s; see $DIR/ctld/slurmctld.log" >&2
sinfo -N >&2 || true
exit 1
