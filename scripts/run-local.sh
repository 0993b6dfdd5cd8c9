#!/usr/bin/env bash
# Starts a three-node cronoq cluster on loopback with one worker, and keeps
# submitting tasks so the cluster is visibly doing work. Ctrl-C stops
# everything and removes the data.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/cronoq}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/cronoq-run.XXXXXX")
ADDRS=127.0.0.1:8650,127.0.0.1:8660,127.0.0.1:8670
JOIN="-join 127.0.0.1:8652 -join 127.0.0.1:8662 -join 127.0.0.1:8672"
pids=()

cleanup() {
	trap - INT TERM EXIT
	echo
	echo "==> stopping (${#pids[@]} processes)"
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$DIR"
	echo "==> stopped; removed $DIR"
	exit 0
}
trap cleanup INT TERM EXIT

for i in 1 2 3; do
	base=$((8640 + i * 10))
	"$BIN" agent -node-id "node$i" -data-dir "$DIR/node$i" \
		-http-addr "127.0.0.1:$base" -raft-addr "127.0.0.1:$((base + 1))" \
		-gossip-addr "127.0.0.1:$((base + 2))" -bootstrap-expect 3 $JOIN \
		>"$DIR/node$i.log" 2>&1 &
	pids+=($!)
	echo "==> node$i  http 127.0.0.1:$base  log $DIR/node$i.log"
done

export CRONOQ_ADDR=$ADDRS
echo "==> waiting for a leader"
for _ in $(seq 1 100); do
	if "$BIN" health -rpc-timeout 1s -o json 2>/dev/null | grep -q '"status": *"ok"'; then break; fi
	sleep 0.2
done
"$BIN" health
"$BIN" operator raft list-peers

"$BIN" worker -pool demo -concurrency 4 \
	-handler 'checksum=sha256sum | cut -c1-16' \
	-handler 'upper=tr a-z A-Z' \
	-handler 'flaky=if [ "$CRONOQ_ATTEMPT" -lt 2 ]; then echo "first attempt fails" >&2; exit 75; fi; echo "ok on attempt $CRONOQ_ATTEMPT"' \
	-handler 'report=for f in "$CRONOQ_DEPS_DIR"/*; do echo "$(basename "$f"): $(cat "$f")"; done' \
	>"$DIR/worker.log" 2>&1 &
pids+=($!)
echo "==> worker on pool demo  log $DIR/worker.log"

"$BIN" recurring add heartbeat -cron '@every 10s' -pool demo -kind upper -payload 'tick from cron' >/dev/null
echo "==> recurring schedule 'heartbeat' fires every 10s"
echo "==> submitting tasks; try: CRONOQ_ADDR=$ADDRS $BIN list -pool demo   (Ctrl-C to stop)"

kinds=(checksum upper flaky)
i=0
while true; do
	kind=${kinds[$((i % 3))]}
	start=$(date +%s%N)
	if out=$("$BIN" submit -pool demo -kind "$kind" -payload "job $i" -wait -o json 2>&1); then
		ms=$((($(date +%s%N) - start) / 1000000))
		id=$(printf '%s' "$out" | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -1)
		output=$(printf '%s' "$out" | sed -n 's/.*"output": *"\([^"]*\)".*/\1/p' | head -1 | sed 's/\\n$//')
		attempt=$(printf '%s' "$out" | sed -n 's/.*"attempt": *\([0-9]*\).*/\1/p' | head -1)
		printf '%s  %-8s %s  succeeded in %4d ms (attempt %s): %s\n' "$(date +%T)" "$kind" "$id" "$ms" "$attempt" "$output"
	else
		printf '%s  %-8s failed: %s\n' "$(date +%T)" "$kind" "$out"
	fi
	i=$((i + 1))
	sleep 1
done
