#!/usr/bin/env bash
# The three-node cluster of deploy/docker-compose.yml under faults, with a
# worker on this host. Tasks are submitted before, during and after each
# fault: the leader's container is killed (docker kill) and started again,
# then the next leader is cut off its network (docker network disconnect)
# and reconnected. Every task whose submit was acknowledged must end
# succeeded, and the three nodes must be back together at the end.
#
# Each run has its own compose project, subnet and host ports; its
# containers, network and volumes are removed on exit, whatever happened.
# Needs docker, docker-compose (1.29), jq, ss, the binary (make build) and
# the image (make docker; 'make docker-test' does both first). Run as root
# (or as a member of the docker group).
#
# Settings: BIN (bin/cronoq), DOCKER_IMAGE (cronoq:dev),
# DOCKER_TEST_TASKS (200), DOCKER_TEST_LIMIT (seconds for the run before
# cleanup, 240; a run takes about 75).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/cronoq}
IMAGE=${DOCKER_IMAGE:-cronoq:dev}
TASKS=${DOCKER_TEST_TASKS:-200}
LIMIT=${DOCKER_TEST_LIMIT:-240}
POOL=dockertest
COMPOSE=(docker-compose -f deploy/docker-compose.yml)

started=$(date +%s%N)
deadline=$(($(date +%s) + LIMIT))
work=""
project=""
bg_pids=()
worker_pid=""

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
elapsed() { printf '%d.%ds' $(($(ms_since "$started") / 1000)) $(($(ms_since "$started") % 1000 / 100)); }
log() { printf '==> [%6s] %s\n' "$(elapsed)" "$*"; }
die() {
	printf 'docker-test: FAIL: %s\n' "$*" >&2
	exit 1
}

# ---------------------------------------------------------------------------
# Cleanup: stop what this script started, by pid, then remove the project.

stop_pid() { # pid: SIGTERM, then SIGKILL after 10 s
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

dump_logs() {
	local i
	echo "---- logs (last 40 lines of each) ----" >&2
	for i in 1 2 3; do
		if [ -n "${cid[$i]:-}" ]; then
			echo "---- node$i ----" >&2
			docker logs --tail 40 "${cid[$i]}" 2>&1 | sed 's/^/  /' >&2 || true
		fi
	done
	for f in worker.log submit.err up.log; do
		if [ -s "$work/$f" ]; then
			echo "---- $f ----" >&2
			tail -n 40 "$work/$f" | sed 's/^/  /' >&2
		fi
	done
}

cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	set +e
	for p in "${bg_pids[@]}"; do stop_pid "$p"; done
	[ -n "$worker_pid" ] && stop_pid "$worker_pid"
	if [ -n "$project" ]; then
		[ "$rc" -ne 0 ] && dump_logs
		"${COMPOSE[@]}" down -v --remove-orphans -t 1 >>"$work/down.log" 2>&1
		# Whatever down left (a failed up, a container cut off its network).
		local label=com.docker.compose.project=$project
		local left
		left=$(docker ps -aq --filter "label=$label")
		[ -n "$left" ] && docker rm -fv $left >/dev/null
		left=$(docker network ls -q --filter "label=$label")
		[ -n "$left" ] && docker network rm $left >/dev/null
		left=$(docker volume ls -q --filter "label=$label")
		[ -n "$left" ] && docker volume rm $left >/dev/null
		if [ -n "$(docker ps -aq --filter "label=$label")$(docker network ls -q --filter "label=$label")$(docker volume ls -q --filter "label=$label")" ]; then
			echo "docker-test: could not remove everything of project $project" >&2
			[ "$rc" -eq 0 ] && rc=1
		else
			echo "==> removed the containers, network and volumes of project $project"
		fi
	fi
	[ -n "$work" ] && rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------
# Preflight.

for c in docker docker-compose jq ss; do
	command -v "$c" >/dev/null || die "$c is not installed"
done
docker info >/dev/null 2>&1 || die "'docker info' failed: the Docker daemon is not reachable (is it running, and may this user use it?)"
[ -x "$BIN" ] || die "$BIN not found: run make build"
docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE not found: run make docker"

work=$(mktemp -d "${TMPDIR:-/tmp}/cronoq-docker-test.XXXXXX")
: >"$work/acked"

# wait_for DESC SECONDS CMD...: poll CMD until it succeeds; fail after
# SECONDS or at the run's deadline.
wait_for() {
	local desc=$1 secs=$2
	shift 2
	local until=$(($(date +%s) + secs)) limit="after $secs s"
	[ "$until" -gt "$deadline" ] && until=$deadline && limit="at the run's limit of $LIMIT s"
	why=""
	until "$@"; do
		[ "$(date +%s)" -lt "$until" ] || die "timed out $limit waiting for $desc${why:+ ($why)}"
		sleep 0.25
	done
}

# ---------------------------------------------------------------------------
# A subnet and three host ports nobody uses.

ip2int() {
	local a b c d
	IFS=. read -r a b c d <<<"$1"
	echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

subnet_free() { # PREFIX (a.b.c): no route of this host overlaps PREFIX.0/24
	local net=$(($(ip2int "$1.0"))) dst len base mask
	while read -r dst _; do
		[ "$dst" = default ] && continue
		len=32
		[[ $dst == */* ]] && len=${dst#*/} && dst=${dst%/*}
		[ "$len" -gt 24 ] && len=24
		mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
		base=$(($(ip2int "$dst") & mask))
		[ $((net & mask)) -eq "$base" ] && return 1
	done < <(ip -4 route show table all type unicast 2>/dev/null || ip -4 route)
	return 0
}

port_free() { [ -z "$(ss -Htan "( sport = :$1 )")" ]; }

pick_network() {
	while :; do
		net_prefix=10.$((200 + RANDOM % 50)).$((RANDOM % 256))
		subnet_free "$net_prefix" && break
	done
	port=()
	while [ ${#port[@]} -lt 3 ]; do
		local p=$((20000 + RANDOM % 12000))
		if port_free "$p" && [[ " ${port[*]} " != *" $p "* ]]; then port+=("$p"); fi
	done
	port=("" "${port[@]}") # port[1..3]
}

# ---------------------------------------------------------------------------
# Start the cluster.

project=cronoq-test-$$-$(date +%s)
export COMPOSE_PROJECT_NAME=$project CRONOQ_IMAGE=$IMAGE
declare -a cid port
for try in 1 2 3; do
	pick_network
	export CRONOQ_NET_PREFIX=$net_prefix CRONOQ_HTTP_PORT1=${port[1]} CRONOQ_HTTP_PORT2=${port[2]} CRONOQ_HTTP_PORT3=${port[3]}
	log "starting project $project: network $net_prefix.0/24, API on 127.0.0.1:${port[1]},${port[2]},${port[3]}"
	if "${COMPOSE[@]}" up -d >"$work/up.log" 2>&1; then break; fi
	if [ "$try" -lt 3 ] && grep -qiE 'overlap|address already in use|port is already allocated' "$work/up.log"; then
		log "subnet or port taken meanwhile, trying others"
		"${COMPOSE[@]}" down -v --remove-orphans -t 1 >/dev/null 2>&1 || true
		continue
	fi
	die "docker-compose up failed: $(tail -n 5 "$work/up.log")"
done
for i in 1 2 3; do
	cid[i]=$("${COMPOSE[@]}" ps -q "node$i")
	[ -n "${cid[i]}" ] || die "no container for node$i"
done
network=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "${cid[1]}")
ADDRS=127.0.0.1:${port[1]},127.0.0.1:${port[2]},127.0.0.1:${port[3]}

# ---------------------------------------------------------------------------
# What the cluster says.

health_of() { # node index -> health JSON of that node only
	"$BIN" health -addr "127.0.0.1:${port[$1]}" -rpc-timeout 2s -o json 2>/dev/null
}
leader_of() { health_of "$1" | jq -r '.leader // ""'; }
docker_healthy() { [ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "${cid[$1]}")" = healthy ]; }
running() { [ "$(docker inspect -f '{{.State.Running}}' "${cid[$1]}")" = true ]; }
stopped() { ! running "$1"; }

# agree NODES... [-not NAME]: the nodes all know the same leader (not NAME).
agreed_leader=""
agree() {
	local not="" nodes=() n l first=""
	while [ $# -gt 0 ]; do
		if [ "$1" = -not ]; then not=$2 && shift 2; else nodes+=("$1") && shift; fi
	done
	for n in "${nodes[@]}"; do
		l=$(leader_of "$n") || return 1
		[ -n "$l" ] && [ "$l" != "$not" ] || return 1
		[ -z "$first" ] && first=$l
		[ "$l" = "$first" ] || return 1
	done
	agreed_leader=$first
}

# members_view NODE: "name=status ..." as gossip on that node sees it.
members_view() {
	"$BIN" members -addr "127.0.0.1:${port[$1]}" -rpc-timeout 2s -o json 2>/dev/null |
		jq -r '[.[] | "\(.name)=\(.status)"] | sort | join(" ")'
}
voters_view() {
	"$BIN" operator raft list-peers -addr "$ADDRS" -rpc-timeout 3s -o json 2>/dev/null |
		jq -r '[.[] | select(.voter) | .id] | sort | join(" ")'
}
# whole: three healthy containers that agree on the leader, each seeing all
# three members alive, and three voters. why says what is missing.
why=""
whole() {
	local i v
	for i in 1 2 3; do
		docker_healthy "$i" || { why="node$i's container is not healthy" && return 1; }
	done
	if ! agree 1 2 3; then
		why="the nodes do not agree on a leader: node1: $(leader_of 1), node2: $(leader_of 2), node3: $(leader_of 3)"
		return 1
	fi
	for i in 1 2 3; do
		v=$(members_view "$i")
		[ "$v" = "node1=alive node2=alive node3=alive" ] || { why="node$i sees members: ${v:-(no answer)}" && return 1; }
	done
	v=$(voters_view)
	[ "$v" = "node1 node2 node3" ] || { why="voters: ${v:-(no answer)}" && return 1; }
	why=""
}

index_of() { # node name -> index
	case $1 in node1) echo 1 ;; node2) echo 2 ;; node3) echo 3 ;; *) die "unexpected node name '$1'" ;; esac
}

# ---------------------------------------------------------------------------
# Submitting: batches of sequential submits (in the background while a fault
# happens), each acknowledged id appended to $work/acked.

submitted=0
batch() { # NAME COUNT FIRST
	local name=$1 count=$2 first=$3 i sub="" rc
	# Ended, it ends its submit too.
	trap '[ -n "$sub" ] && kill -TERM "$sub" 2>/dev/null; exit 143' TERM
	: >"$work/acked.$name"
	for ((i = first; i < first + count; i++)); do
		"$BIN" submit -addr "$ADDRS" -pool "$POOL" -kind hash -payload "task $i of $project" \
			-key "$project-$i" -o json >"$work/out.$name" 2>>"$work/submit.err" &
		sub=$!
		rc=0
		wait "$sub" || rc=$?
		sub=""
		if [ "$rc" -eq 0 ]; then
			jq -r .id <"$work/out.$name" | tee -a "$work/acked" >>"$work/acked.$name"
		else
			echo "$i" >>"$work/unacked"
		fi
	done
}
batch_pid=""
start_batch() { # NAME COUNT
	batch "$1" "$2" $((submitted + 1)) &
	batch_pid=$!
	bg_pids+=("$batch_pid")
	submitted=$((submitted + $2))
}
wait_batch() {
	local rc=0
	wait "$batch_pid" || rc=$?
	[ "$rc" -eq 0 ] || die "the submitting loop failed (exit $rc)"
	batch_pid=""
}
acked_in() { [ -f "$work/acked.$1" ] && wc -l <"$work/acked.$1" || echo 0; }
batch_has() { [ "$(acked_in "$1")" -ge "$2" ]; }
batch_done() { ! kill -0 "$batch_pid" 2>/dev/null; }

# ---------------------------------------------------------------------------
# The run.

t=$(date +%s%N)
wait_for "three healthy containers, one leader, three alive members and voters" 60 whole
log "cluster up in $(ms_since "$t") ms: leader $agreed_leader"

"$BIN" worker -addr "$ADDRS" -pool "$POOL" -concurrency 4 -handler 'hash=sleep 0.5; sha256sum | cut -c1-16' \
	>"$work/worker.log" 2>&1 &
worker_pid=$!
log "worker on the host (pid $worker_pid) for pool $POOL"

# Batches: before any fault, across the leader kill, across the restart,
# across the disconnect, after the reconnect.
n_before=$((TASKS * 25 / 100))
n_kill=$((TASKS * 25 / 100))
n_restart=$((TASKS * 15 / 100))
n_cut=$((TASKS * 25 / 100))
n_after=$((TASKS - n_before - n_kill - n_restart - n_cut))

start_batch before "$n_before"
wait_batch
log "submitted $n_before tasks ($(acked_in before) acknowledged)"

# 1. Kill the leader's container while submits go on.
start_batch kill "$n_kill"
wait_for "submits of the kill batch" 30 batch_has kill 3
killed_name=$(leader_of 1) || die "no health from node1"
[ -n "$killed_name" ] || die "node1 knows no leader"
k=$(index_of "$killed_name")
t=$(date +%s%N)
docker kill "${cid[k]}" >/dev/null
wait_for "node$k's container to stop" 10 stopped "$k"
survivors=()
for i in 1 2 3; do [ "$i" -ne "$k" ] && survivors+=("$i"); done
wait_for "a new leader among the other nodes" 30 agree "${survivors[@]}" -not "$killed_name"
failover_ms=$(ms_since "$t")
after_kill=$agreed_leader
log "killed $killed_name (the leader); $after_kill leads after $failover_ms ms"
wait_for "the kill batch" 90 batch_done
wait_batch
log "kill batch: $(acked_in kill) of $n_kill acknowledged"

# 2. Start it again: it comes back with its data and address.
start_batch restart "$n_restart"
t=$(date +%s%N)
docker start "${cid[k]}" >/dev/null
wait_for "$killed_name back: healthy, following the leader, all members alive" 60 whole
rejoin_ms=$(ms_since "$t")
log "started $killed_name again; the cluster is whole after $rejoin_ms ms (leader $agreed_leader)"
wait_for "the restart batch" 90 batch_done
wait_batch
log "restart batch: $(acked_in restart) of $n_restart acknowledged"

# 3. Cut the leader off the network while submits go on, then reconnect it.
cut_name=$agreed_leader
c=$(index_of "$cut_name")
cut_ip=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$network\").IPAddress}}" "${cid[c]}")
[ "$cut_ip" = "$net_prefix.1$c" ] || die "$cut_name has address $cut_ip, not $net_prefix.1$c"
start_batch cut "$n_cut"
wait_for "submits of the disconnect batch" 30 batch_has cut 3
others=()
for i in 1 2 3; do [ "$i" -ne "$c" ] && others+=("$i"); done
t=$(date +%s%N)
docker network disconnect "$network" "${cid[c]}"
wait_for "a new leader among the connected nodes" 30 agree "${others[@]}" -not "$cut_name"
cut_failover_ms=$(ms_since "$t")
after_cut=$agreed_leader
log "disconnected $cut_name (the leader); $after_cut leads after $cut_failover_ms ms"
wait_for "the disconnect batch" 90 batch_done
wait_batch
log "disconnect batch: $(acked_in cut) of $n_cut acknowledged while $cut_name was cut off"
docker network connect --ip "$cut_ip" --alias "$cut_name" "$network" "${cid[c]}"
t=$(date +%s%N)
start_batch after "$n_after"
wait_for "$cut_name back: healthy, following the leader, all members alive" 60 whole
reconnect_ms=$(ms_since "$t")
log "reconnected $cut_name; the cluster is whole after $reconnect_ms ms (leader $agreed_leader)"
wait_for "the last batch" 90 batch_done
wait_batch
log "last batch: $(acked_in after) of $n_after acknowledged"

# ---------------------------------------------------------------------------
# Every acknowledged task must end succeeded.

# statuses: "id status attempt" of every task of the pool, page by page.
statuses() {
	local after="" page
	: >"$work/status"
	while :; do
		page=$("$BIN" list -addr "$ADDRS" -pool "$POOL" -limit 1000 ${after:+-after "$after"} -rpc-timeout 10s -o json 2>>"$work/list.err") || return 1
		jq -r '.tasks[] | "\(.id) \(.status) \(.attempt)"' <<<"$page" >>"$work/status"
		after=$(jq -r '.next // ""' <<<"$page")
		[ -n "$after" ] || return 0
	done
}
# check: counts of the acknowledged ids by status (missing: not listed);
# true once all succeeded; fails the run when one ended otherwise.
check() {
	statuses || return 1
	awk 'NR == FNR { st[$1] = $2; at[$1] = $3; next }
		{ s = ($1 in st) ? st[$1] : "missing"; n[s]++; if (at[$1] > 1) retried++
		  if (s == "failed" || s == "cancelled" || s == "expired") bad = bad " " $1 "(" s ")" }
		END { for (s in n) printf "%s=%d ", s, n[s]; printf "retried=%d\n", retried
		      if (bad != "") print "ENDED WITHOUT SUCCEEDING:" bad }' \
		"$work/status" "$work/acked" >"$work/check"
	! grep -q 'ENDED WITHOUT' "$work/check" || die "acknowledged tasks did not succeed: $(cat "$work/check")"
	acked=$(wc -l <"$work/acked")
	grep -q "succeeded=$acked " "$work/check"
}
acked=$(wc -l <"$work/acked")
unacked=0
[ -f "$work/unacked" ] && unacked=$(wc -l <"$work/unacked")
t=$(date +%s%N)
wait_for "every acknowledged task to succeed" 90 check
log "all $acked acknowledged tasks succeeded ($(ms_since "$t") ms after the last submit)"
retried=$(sed -n 's/.*retried=\([0-9]*\).*/\1/p' "$work/check")
dups=$(sort "$work/acked" | uniq -d | wc -l)

stop_pid "$worker_pid"
worker_pid=""
[ "$dups" -eq 0 ] || die "$dups ids were acknowledged twice"
[ "$unacked" -eq 0 ] || die "$unacked of $TASKS submits were not acknowledged (see above): $(tail -n 3 "$work/submit.err")"
[ "$(date +%s)" -le "$deadline" ] || die "the run took longer than $LIMIT s"

cat <<EOF
==> summary ($project)
  tasks:      $TASKS submitted, $acked acknowledged, all succeeded; $retried needed more than one attempt
  kill:       $killed_name (leader) killed; new leader $after_kill after $failover_ms ms; whole again $rejoin_ms ms after its restart
  disconnect: $cut_name (leader) cut off; new leader $after_cut after $cut_failover_ms ms; whole again $reconnect_ms ms after reconnecting
  time:       $(elapsed) (cleanup next)
EOF
