//go:build jepsenfaults

package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// A slow disk (every log write takes 150ms) makes changes pile up waiting
// for the log: past the write path's threshold, submits are refused as
// overloaded (ErrWritePathSaturated, with nothing admitted), health says
// the write path is saturated, and once the disk is fast again it drains,
// submits are admitted again, and every acknowledged task runs to its end.
func TestSlowDiskSaturatesWritePath(t *testing.T) {
	cfg := Config{
		NodeID: "m1", DataDir: t.TempDir(), Dev: true,
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:1",
		NoSync: true, Logger: hclog.NewNullLogger(),
	}.WithTestTimings()
	cfg.Engine.MaxQueuedBytes = 16 << 10
	n, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	eng := waitEngine(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	n.FaultDisk().Set(150*time.Millisecond, 0)
	var (
		mu        sync.Mutex
		acked     []string
		refused   int
		saturated []string // health reasons seen while refused
	)
	spec := core.Spec{Template: fsm.Template{Pool: "p", Kind: "k", Payload: make([]byte, 1024)}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := n.Submit(ctx, SubmitOne, []Spec{spec})
				mu.Lock()
				switch {
				case err == nil:
					acked = append(acked, res.Tasks[0].ID)
				case errors.Is(err, ErrWritePathSaturated):
					refused++
					if len(saturated) == 0 {
						for _, r := range n.Health().Reasons {
							if strings.Contains(r, "write path saturated") {
								saturated = append(saturated, r)
							}
						}
					}
				default:
					t.Errorf("submit: %v", err)
				}
				mu.Unlock()
				if errors.Is(err, ErrWritePathSaturated) {
					time.Sleep(10 * time.Millisecond) // the retry-after hint, shortened
				}
			}
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refused > 0 && len(saturated) > 0
	}, 30*time.Second, 10*time.Millisecond, "the write path never saturated")
	close(stop)
	wg.Wait()
	require.True(t, errors.Is(ErrWritePathSaturated, ErrOverloaded))
	st := eng.Stats()
	require.Positive(t, st.SaturatedRefusals)
	require.Contains(t, saturated[0], "submits are refused until it drains")

	// A fast disk again: the write path drains and health clears.
	n.FaultDisk().Set(0, 0)
	require.Eventually(t, func() bool { return !eng.Stats().Saturated }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		for _, r := range n.Health().Reasons {
			if strings.Contains(r, "write path") {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	_, err = n.Submit(ctx, SubmitOne, []Spec{spec})
	require.NoError(t, err)

	// Every acknowledged task is durable and runs to its end.
	t.Logf("%d submits acknowledged, %d refused", len(acked), refused)
	require.NotEmpty(t, acked)
	state, _ := n.StaleRead()
	for _, id := range acked {
		_, ok := state.Get(id)
		require.True(t, ok, "acknowledged task %s is not in the state", id)
	}
	done := 0
	for done < len(acked)+1 {
		grants, err := eng.Poll(ctx, core.Offer{Worker: "w", Pool: "p", Slots: 256})
		require.NoError(t, err)
		cs := make([]engine.Completion, len(grants))
		for i, g := range grants {
			cs[i] = engine.Completion{Lease: g.Lease, Outcome: core.Outcome{Kind: core.OutcomeSuccess}}
		}
		for _, err := range eng.CompleteMany(ctx, cs) {
			require.NoError(t, err)
		}
		done += len(grants)
	}
	for _, id := range acked {
		task, _ := state.Get(id)
		require.Equal(t, fsm.StatusSucceeded, task.Status, "task %s", id)
	}
}
