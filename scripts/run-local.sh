#!/usr/bin/env bash
# Starts a three-node cronoq cluster on loopback with one worker, and keeps
# submitting tasks so the cluster is visibly doing work. Ctrl-C (or SIGTERM,
# or the loss of the reader of its output) stops everything and removes the
# data. It checks first that its ports are free (CRONOQ_RUN_BASE moves
# them: the nodes' API ports are BASE+10, +20 and +30), and that each node
# started.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/cronoq}
# Node i (1..3) listens on BASE+10*i (API), +1 (Raft) and +2 (gossip).
BASE=${CRONOQ_RUN_BASE:-8640}
ports=()
for i in 1 2 3; do ports+=($((BASE + i * 10)) $((BASE + i * 10 + 1)) $((BASE + i * 10 + 2))); done
ADDRS=127.0.0.1:$((BASE + 10)),127.0.0.1:$((BASE + 20)),127.0.0.1:$((BASE + 30))
JOIN="-join 127.0.0.1:$((BASE + 12)) -join 127.0.0.1:$((BASE + 22)) -join 127.0.0.1:$((BASE + 32))"

# Every port must be free: a node that cannot listen would leave the others
# to join whatever holds it (such as a 'cronoq agent -dev' on 8650).
for p in "${ports[@]}"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "make run: port $p on 127.0.0.1 is in use; stop what listens there" \
			"(see: ss -ltnp 'sport = :$p'), or choose other ports with CRONOQ_RUN_BASE (now $BASE)," \
			"for instance: make run CRONOQ_RUN_BASE=9640" >&2
		exit 1
	fi
done

DIR=$(mktemp -d "${TMPDIR:-/tmp}/cronoq-run.XXXXXX")
pids=()
stopping=

cleanup() {
	local code=${1:-0}
	# Output may go to a pipe whose reader is gone (make run | tee log, after
	# Ctrl-C): a failed write must not end the cleanup.
	trap '' PIPE INT TERM
	trap - EXIT
	set +e
	[ -n "$stopping" ] && return
	stopping=1
	echo 2>/dev/null
	echo "==> stopping (${#pids[@]} processes)" 2>/dev/null
	[ -n "${child:-}" ] && kill -TERM "$child" 2>/dev/null
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	# The processes are disowned (so that bash reports no job when one is
	# killed): wait by polling, then force what is left after 60 s.
	for _ in $(seq 1 600); do
		alive=
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ -z "$alive" ] && break
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$DIR"
	echo "==> stopped; removed $DIR" 2>/dev/null
	exit "$code"
}
trap cleanup INT TERM PIPE HUP EXIT

# fail stops everything after node $1 failed, with the tail of its log.
fail() {
	echo "make run: node$1 $2; the end of its log ($DIR/node$1.log):" >&2
	tail -n 20 "$DIR/node$1.log" | sed 's/^/    /' >&2
	cleanup 1
}

# The three nodes share this machine: each gets a third of 80% of the
# memory available now as its soft limit (an agent's default, half the
# machine, is for one node per machine; see docs/operations.md, "Memory").
MEMLIMIT=()
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || true)
if [ -n "$avail_kb" ]; then
	MEMLIMIT=(-memory-limit "$((avail_kb * 8 / 10 / 3 / 1024))MiB")
fi

for i in 1 2 3; do
	base=$((BASE + i * 10))
	"$BIN" agent -node-id "node$i" -data-dir "$DIR/node$i" \
		-http-addr "127.0.0.1:$base" -raft-addr "127.0.0.1:$((base + 1))" \
		-gossip-addr "127.0.0.1:$((base + 2))" -bootstrap-expect 3 $JOIN "${MEMLIMIT[@]}" \
		>"$DIR/node$i.log" 2>&1 &
	pids+=($!)
	disown $!
	echo "==> node$i  http 127.0.0.1:$base  log $DIR/node$i.log"
done

# Each node must come up: its API answers, whatever its health; a node that
# exits meanwhile stops everything at once.
up=(0 0 0)
for _ in $(seq 1 150); do
	all=1
	for i in 1 2 3; do
		kill -0 "${pids[$((i - 1))]}" 2>/dev/null || fail "$i" "exited at start"
		[ "${up[$((i - 1))]}" = 1 ] && continue
		out=$("$BIN" health -addr "127.0.0.1:$((BASE + i * 10))" -rpc-timeout 1s 2>&1) || true
		case $out in
		*"no node reachable"*) all= ;;
		*) up[$((i - 1))]=1 ;;
		esac
	done
	[ -n "$all" ] && break
	sleep 0.1
done
for i in 1 2 3; do
	[ "${up[$((i - 1))]}" = 1 ] || fail "$i" "does not answer on 127.0.0.1:$((BASE + i * 10)) after 15 s"
done

export CRONOQ_ADDR=$ADDRS
echo "==> waiting for a leader"
leader=
for _ in $(seq 1 100); do
	if "$BIN" health -rpc-timeout 1s -o json 2>/dev/null | grep -q '"status": *"ok"'; then
		leader=1
		break
	fi
	sleep 0.2
done
if [ -z "$leader" ]; then
	echo "make run: the cluster has no healthy leader after 20 s; the nodes' logs are in $DIR" >&2
fi
"$BIN" health
"$BIN" operator raft list-peers

"$BIN" worker -pool demo -concurrency 4 \
	-handler 'checksum=sha256sum | cut -c1-16' \
	-handler 'upper=tr a-z A-Z' \
	-handler 'flaky=if [ "$CRONOQ_ATTEMPT" -lt 2 ]; then echo "first attempt fails" >&2; exit 75; fi; echo "ok on attempt $CRONOQ_ATTEMPT"' \
	-handler 'report=for f in "$CRONOQ_DEPS_DIR"/*; do echo "$(basename "$f"): $(cat "$f")"; done' \
	>"$DIR/worker.log" 2>&1 &
pids+=($!)
disown $!
echo "==> worker on pool demo  log $DIR/worker.log"

"$BIN" recurring add heartbeat -cron '@every 10s' -pool demo -kind upper -payload 'tick from cron' >/dev/null
echo "==> recurring schedule 'heartbeat' fires every 10s"
echo "==> submitting tasks; try: CRONOQ_ADDR=$ADDRS $BIN list -pool demo   (Ctrl-C to stop)"

kinds=(checksum upper flaky)
i=0
# Each step runs in the background and is waited for with the wait builtin,
# which a signal interrupts at once: the trap then runs even though cronoq
# itself handles SIGINT (bash would otherwise let the loop go on).
child=
while true; do
	kind=${kinds[$((i % 3))]}
	start=$(date +%s%N)
	"$BIN" submit -pool demo -kind "$kind" -payload "job $i" -wait -o json >"$DIR/submit.out" 2>&1 &
	child=$!
	if wait "$child"; then
		out=$(cat "$DIR/submit.out")
		ms=$((($(date +%s%N) - start) / 1000000))
		id=$(printf '%s' "$out" | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -1)
		output=$(printf '%s' "$out" | sed -n 's/.*"output": *"\([^"]*\)".*/\1/p' | head -1 | sed 's/\\n$//')
		attempt=$(printf '%s' "$out" | sed -n 's/.*"attempt": *\([0-9]*\).*/\1/p' | head -1)
		printf '%s  %-8s %s  succeeded in %4d ms (attempt %s): %s\n' "$(date +%T)" "$kind" "$id" "$ms" "$attempt" "$output"
	else
		printf '%s  %-8s failed: %s\n' "$(date +%T)" "$kind" "$(cat "$DIR/submit.out")"
	fi
	i=$((i + 1))
	sleep 1 &
	child=$!
	wait "$child"
done
