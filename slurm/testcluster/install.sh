#!/usr/bin/env bash
# Installs what the one-machine test cluster needs: Debian's Slurm 22.05 (controller, node daemon,
# client commands), munge, its authentication daemon, and the tools that give each simulated node
# its own network (iproute2: ip, tc; util-linux: nsenter, unshare). Run as root on Debian 12;
# takes about 20 s with a warm apt cache. start.sh writes the config and starts the daemons.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
    echo "install.sh: run as root (it installs Debian packages)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# A machine whose image was cut during an earlier install refuses every apt-get until dpkg finishes
# configuring what it had unpacked; on a sound machine this does nothing.
dpkg --configure -a
apt-get update -q
apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge iproute2 util-linux
