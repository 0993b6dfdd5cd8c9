package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

// eventLog collects status events from the SDK's subscription.
type eventLog struct {
	mu     sync.Mutex
	events []client.Event
	lagged int
	err    error
}

func (l *eventLog) run(ch <-chan client.Event) {
	for ev := range ch {
		l.mu.Lock()
		switch {
		case ev.Err != nil:
			l.err = ev.Err
		case ev.Lagged:
			l.lagged++
		default:
			l.events = append(l.events, ev)
		}
		l.mu.Unlock()
	}
}

func (l *eventLog) snapshot() ([]client.Event, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events), l.lagged, l.err
}

// execRecord is one run of the handler, as it logged itself.
type execRecord struct {
	id      string
	attempt int
	lease   uint64
}

func readExecLog(t *testing.T, path string) []execRecord {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var recs []execRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.Len(t, fields, 3, "exec log line %q", sc.Text())
		attempt, err := strconv.Atoi(fields[1])
		require.NoError(t, err)
		lease, err := strconv.ParseUint(fields[2], 10, 64)
		require.NoError(t, err)
		recs = append(recs, execRecord{fields[0], attempt, lease})
	}
	require.NoError(t, sc.Err())
	return recs
}

// TestLeaderKill9UnderLoad kills the leader with SIGKILL while tasks are
// being submitted and run: every acknowledged task succeeds exactly once
// with the handler's output, re-submits after an unknown outcome (same key)
// make no duplicates, and the killed node comes back with the same data.
func TestLeaderKill9UnderLoad(t *testing.T) {
	const (
		pool   = "load"
		nTasks = 200
		killAt = 60 // acknowledged submits before the kill
	)
	c := newCluster(t, withAgentFlags("-heartbeat-window", "3s"))
	leader, followers := c.followers()
	t.Logf("leader %s", leader.id)

	// Each run logs itself, then writes "out-ID-ATTEMPT-LEASE-" and the
	// payload (stdin): the output tells which run it came from.
	execLog := filepath.Join(t.TempDir(), "exec.log")
	handler := fmt.Sprintf(`echo "$CRONOQ_TASK_ID $CRONOQ_ATTEMPT $CRONOQ_LEASE" >> %s; `+
		`printf 'out-%%s-%%s-%%s-' "$CRONOQ_TASK_ID" "$CRONOQ_ATTEMPT" "$CRONOQ_LEASE"; cat; sleep 0.05`, shellQuote(execLog))
	// The leader first: the worker most likely works through the node that
	// is about to die.
	workerAddrs := c.addrs(append([]*node{leader}, followers...)...)
	c.startWorker(t, "worker-load", workerAddrs, "-pool", pool, "-concurrency", "8", "-handler", "job="+handler)

	// Status events through the SDK, for the whole run.
	cl, err := client.New(strings.Split(c.addrs(), ","), sdkOptions(client.WithTimeout(5*time.Second))...)
	require.NoError(t, err)
	defer cl.Close()
	evCtx, stopEvents := context.WithCancel(context.Background())
	defer stopEvents()
	evs, err := cl.Events(evCtx, pool)
	require.NoError(t, err)
	var elog eventLog
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		elog.run(evs)
	}()
	defer func() { stopEvents(); <-evDone }()
	// The subscription is live once a warm-up task's events arrive (one more
	// warm-up task per poll, in case the first ran before it was).
	warm := map[string]bool{} // ids
	eventually(t, 20*time.Second, func() (bool, string) {
		events, _, err := elog.snapshot()
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range events {
			if warm[ev.TaskID] && ev.Status == "succeeded" {
				return true, ""
			}
		}
		key := fmt.Sprintf("warm-up-%d", len(warm))
		warm[c.submit(t, "-pool", pool, "-kind", "job", "-key", key, "-payload", key)] = true
		return false, fmt.Sprintf("%d events, none for a warm-up task's success", len(events))
	})

	// Submitters: every key is submitted until acknowledged; an error
	// (unknown outcome included) is answered by submitting again with the
	// same key.
	keys := make(chan string, nTasks)
	for i := range nTasks {
		keys <- fmt.Sprintf("task-%03d", i)
	}
	close(keys)
	var (
		ackMu         sync.Mutex
		acked         = map[string]string{} // key -> id
		ackErrs       []string
		acks          atomic.Int64
		resubmit      atomic.Int64
		retriedOK     atomic.Int64
		dupAfterRetry atomic.Int64
		submitErrs    = map[string]int{}
		wg            sync.WaitGroup
	)
	submitCtx, cancelSubmit := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancelSubmit()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range keys {
				// Whether a failed submit of this key said its outcome
				// was unknown (it may have been admitted).
				unknown := false
				for try := 0; submitCtx.Err() == nil; try++ {
					r, err := runCLI(submitCtx, nil, "submit", "-pool", pool, "-kind", "job", "-key", key, "-payload", key,
						"-rpc-timeout", "2s", "-o", "json", "-addr", c.addrs())
					if err != nil || r.code != 0 {
						// Outcome unknown (or refused while no leader is
						// known): the same key again.
						resubmit.Add(1)
						if strings.Contains(r.stderr, "outcome unknown") {
							unknown = true
						}
						ackMu.Lock()
						submitErrs[strings.TrimSpace(r.stderr)]++
						ackMu.Unlock()
						continue
					}
					var s submitJSON
					if err := decodeStrictErr([]byte(r.stdout), &s); err != nil {
						ackMu.Lock()
						ackErrs = append(ackErrs, fmt.Sprintf("%s: %v: %s", key, err, r.stdout))
						ackMu.Unlock()
						break
					}
					// A first call may answer duplicate too: the client
					// repeats a submit whose attempt was cut off in
					// flight (it carries its key), and that attempt may
					// have been admitted. The key still names one task
					// (checked below).
					if try > 0 {
						retriedOK.Add(1)
						if s.Duplicate {
							// A submit that failed had been admitted
							// after all: the failure must have said
							// the outcome was unknown.
							dupAfterRetry.Add(1)
							if !unknown {
								ackMu.Lock()
								ackErrs = append(ackErrs, fmt.Sprintf("key %s: a failed submit was admitted, but no failure said %q", key, "outcome unknown"))
								ackMu.Unlock()
							}
						}
					}
					ackMu.Lock()
					if prev, ok := acked[key]; ok && prev != s.ID {
						ackErrs = append(ackErrs, fmt.Sprintf("key %s acknowledged as %s and as %s", key, prev, s.ID))
					}
					acked[key] = s.ID
					ackMu.Unlock()
					acks.Add(1)
					break
				}
			}
		}()
	}

	eventually(t, 60*time.Second, func() (bool, string) {
		n := acks.Load()
		return n >= killAt, fmt.Sprintf("%d submits acknowledged", n)
	})
	c.kill9(leader)
	killedAt := time.Now()
	runsBeforeKill := len(readExecLog(t, execLog))
	wg.Wait()
	for msg, n := range submitErrs {
		t.Logf("submit error (%d times): %s", n, msg)
		require.NotContains(t, msg, "\n", "an error is one line")
	}
	require.NoError(t, submitCtx.Err(), "submits did not all get acknowledged")
	require.Empty(t, ackErrs)
	require.Len(t, acked, nTasks)
	newLeader := c.waitStable(30 * time.Second)
	t.Logf("new leader %s after %s; %d submits failed and were repeated, %d keys acknowledged after a repeat (%d as duplicates)", newLeader.id,
		time.Since(killedAt).Round(time.Millisecond), resubmit.Load(), retriedOK.Load(), dupAfterRetry.Load())

	// Every task ends.
	var tasks []taskJSON
	eventually(t, 90*time.Second, func() (bool, string) {
		tasks = c.listAll(t, "-pool", pool)
		var pending []string
		for _, task := range tasks {
			if !terminal(task.Status) {
				pending = append(pending, task.ID+" "+task.Status)
			}
		}
		if len(pending) > 0 {
			return false, fmt.Sprintf("%d of %d tasks not ended, e.g. %v", len(pending), len(tasks), pending[:min(3, len(pending))])
		}
		return true, ""
	})

	// One task per key, the acknowledged one, succeeded with the handler's
	// output.
	byID := map[string]taskJSON{}
	require.Len(t, tasks, nTasks+len(warm), "one task per key")
	for _, task := range tasks {
		byID[task.ID] = task
		if !warm[task.ID] {
			require.Equal(t, acked[task.Key], task.ID, "key %s", task.Key)
		}
		require.Equal(t, "succeeded", task.Status, "task %s (%s): %s", task.ID, task.Key, task.Error)
		require.NotNil(t, task.Output)
		require.GreaterOrEqual(t, task.Attempt, 1)
	}

	// The handler's own log: no lease ran twice, no attempt beyond the
	// task's count, every task ran, and each output is the stdout of the
	// task's last attempt (a completion under an older lease is refused).
	recs := readExecLog(t, execLog)
	leases := map[uint64]execRecord{}
	runs := map[string]int{}
	lastRun := map[string]execRecord{}
	for _, rec := range recs {
		task, ok := byID[rec.id]
		require.True(t, ok, "the handler ran unknown task %s", rec.id)
		prev, dup := leases[rec.lease]
		require.False(t, dup, "lease %d ran twice: %+v and %+v", rec.lease, prev, rec)
		leases[rec.lease] = rec
		require.LessOrEqual(t, rec.attempt, task.Attempt, "task %s ran attempt %d but counts %d", rec.id, rec.attempt, task.Attempt)
		if rec.attempt == task.Attempt {
			lastRun[rec.id] = rec
		}
		runs[rec.id]++
	}
	rerun := 0
	for id, task := range byID {
		require.GreaterOrEqual(t, runs[id], 1, "task %s succeeded without running", id)
		require.LessOrEqual(t, runs[id], task.Attempt, "task %s ran %d times in %d attempts", id, runs[id], task.Attempt)
		if runs[id] > 1 {
			rerun++
			t.Logf("task %s ran %d times in %d attempts", id, runs[id], task.Attempt)
		}
		last, ok := lastRun[id]
		require.True(t, ok, "task %s: attempt %d never ran", id, task.Attempt)
		require.Equal(t, fmt.Sprintf("out-%s-%d-%d-%s", id, last.attempt, last.lease, task.Key), *task.Output,
			"task %s: the output is not the last attempt's stdout", id)
	}
	t.Logf("%d handler runs for %d tasks (%d before the kill); %d tasks ran more than once (lost leases)", len(recs), len(byID), runsBeforeKill, rerun)
	// The kill fell in the middle of the work.
	require.Greater(t, runsBeforeKill, 1)
	require.Less(t, runsBeforeKill, len(recs))

	// Events: never two successes for one task, nothing after the end.
	eventually(t, 10*time.Second, func() (bool, string) {
		events, lagged, _ := elog.snapshot()
		done := map[string]bool{}
		for _, ev := range events {
			if ev.Status == "succeeded" {
				done[ev.TaskID] = true
			}
		}
		return lagged > 0 || len(done) == len(byID), fmt.Sprintf("%d of %d successes seen, no gap reported", len(done), len(byID))
	})
	events, lagged, evErr := elog.snapshot()
	require.NoError(t, evErr)
	ended := map[string]client.Event{}
	for _, ev := range events {
		_, known := byID[ev.TaskID]
		require.True(t, known, "event for unknown task: %+v", ev)
		if prev, ok := ended[ev.TaskID]; ok {
			require.Failf(t, "event after the end", "task %s: %+v after %+v", ev.TaskID, ev, prev)
		}
		switch ev.Status {
		case "succeeded":
			ended[ev.TaskID] = ev
		case "failed", "cancelled", "expired":
			require.Failf(t, "task did not succeed", "%+v", ev)
		}
	}
	t.Logf("%d events, %d successes seen, %d gap markers", len(events), len(ended), lagged)
	if lagged == 0 {
		require.Len(t, ended, len(byID), "with no gap reported, every success is an event")
	}

	// The killed node comes back with its data and catches up.
	c.restart(leader)
	c.waitStable(30 * time.Second)
	eventually(t, 30*time.Second, func() (bool, string) {
		r := cliAt(t, leader.httpAddr, "list", "-pool", pool, "-limit", "1000", "-stale", "-o", "json")
		if r.code != 0 {
			return false, r.String()
		}
		replica := decodeStrict[listJSON](t, r.stdout).Tasks
		if len(replica) != len(tasks) {
			return false, fmt.Sprintf("%s has %d tasks", leader.id, len(replica))
		}
		for i, task := range replica {
			if task.ID != tasks[i].ID || task.Status != tasks[i].Status || *task.Output != *tasks[i].Output {
				return false, fmt.Sprintf("%s has %+v, want %+v", leader.id, task, tasks[i])
			}
		}
		return true, ""
	})
}
