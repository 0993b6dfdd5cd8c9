#!/usr/bin/env bash
# Runs COMMAND in fresh network, PID and mount namespaces, with the loopback
# up and a hard time limit:
#
#   jepsen/run-in-netns.sh LIMIT COMMAND [ARGS...]
#
# LIMIT is a timeout(1) duration (230s, 40m). Inside, the whole of 127/8 is
# the namespace's own loopback, so partitions (iptables rules in the
# namespace's JEPSEN chain) never touch the host's firewall or network.
# When the command ends, however it ends, the namespace's PID 1 exits and the
# kernel kills every process left in it; the namespace and its rules vanish.
# A limit that strikes is a harness error (exit 3).
set -euo pipefail

if [ "$#" -lt 2 ]; then
	echo "usage: $0 LIMIT COMMAND [ARGS...]" >&2
	exit 3
fi
limit=$1
shift
for tool in unshare iptables ip timeout; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "$0: $tool is missing (apt-get install -y iptables iproute2 util-linux coreutils)" >&2
		exit 3
	fi
done

rc=0
unshare --net --pid --fork --mount-proc --kill-child -- \
	/bin/sh -c 'ip link set lo up && exec timeout -k 10 "$0" "$@"' "$limit" "$@" || rc=$?
case $rc in
124 | 137)
	echo "$0: time limit $limit reached" >&2
	exit 3
	;;
esac
exit "$rc"
