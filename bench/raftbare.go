package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// countFSM applies entries by counting them.
type countFSM struct{ n atomic.Uint64 }

func (f *countFSM) Apply(*raft.Log) any { f.n.Add(1); return nil }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	return countSnap(f.n.Load()), nil
}
func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	_, err := io.Copy(io.Discard, rc)
	return err
}

type countSnap uint64

func (s countSnap) Persist(sink raft.SnapshotSink) error {
	if _, err := fmt.Fprintf(sink, "%d", uint64(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}
func (countSnap) Release() {}

// raftNode is one in-process raft node with the storage cronoq uses.
type raftNode struct {
	r     *raft.Raft
	trans *raft.NetworkTransport
	store *raftboltdb.BoltStore
}

func (n *raftNode) close() error {
	var errs []error
	if n.r != nil {
		errs = append(errs, n.r.Shutdown().Error())
	}
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	return errors.Join(errs...)
}

// RaftResult is one run of the bare raft harness.
type RaftResult struct {
	Applies   int64   `json:"applies"`
	Seconds   float64 `json:"seconds"`
	Rate      float64 `json:"applies_per_s"`
	P50ms     float64 `json:"apply_p50_ms"`
	P99ms     float64 `json:"apply_p99_ms"`
	CPUs      float64 `json:"cpu_s"`
	InFlight  int     `json:"in_flight"`
	EntrySize int     `json:"entry_bytes"`
}

// runRaftBare starts three in-process hashicorp/raft nodes (raft-boltdb v2
// with fsync, log cache 512, TCP transport on loopback, raft.DefaultConfig:
// the settings a cronoq agent runs with) and applies 256-byte entries on the
// leader with inflight applies outstanding for d. cur is fed the applies so far.
func runRaftBare(ctx context.Context, dir string, d time.Duration, inflight int, cur *atomic.Int64) (RaftResult, error) {
	res := RaftResult{InFlight: inflight, EntrySize: PayloadSize}
	logf, err := os.Create(filepath.Join(dir, "raft.log"))
	if err != nil {
		return res, err
	}
	defer logf.Close()
	logger := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Error, Output: logf})
	var nodes []*raftNode
	defer func() {
		for _, n := range nodes {
			_ = n.close()
		}
	}()
	var servers []raft.Server
	type parts struct {
		cfg   *raft.Config
		logs  raft.LogStore
		store *raftboltdb.BoltStore
		snaps raft.SnapshotStore
		trans *raft.NetworkTransport
	}
	var ps []parts
	for i := 0; i < 3; i++ {
		nd := filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		if err := os.MkdirAll(nd, 0o700); err != nil {
			return res, err
		}
		store, err := raftboltdb.New(raftboltdb.Options{
			Path:                    filepath.Join(nd, "raft.db"),
			BoltOptions:             &bbolt.Options{Timeout: time.Second},
			MsgpackUseNewTimeFormat: true,
		})
		if err != nil {
			return res, fmt.Errorf("opening raft-boltdb: %w", err)
		}
		n := &raftNode{store: store}
		nodes = append(nodes, n)
		logs, err := raft.NewLogCache(512, store)
		if err != nil {
			return res, err
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(nd, 2, logger)
		if err != nil {
			return res, err
		}
		trans, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, &raft.NetworkTransportConfig{
			MaxPool: 3, Timeout: 10 * time.Second, Logger: logger, MsgpackUseNewTimeFormat: true,
		})
		if err != nil {
			return res, fmt.Errorf("raft transport: %w", err)
		}
		n.trans = trans
		cfg := raft.DefaultConfig()
		cfg.LocalID = raft.ServerID(fmt.Sprintf("n%d", i+1))
		cfg.Logger = logger
		cfg.ShutdownOnRemove = false
		// The agent's default timeouts (cluster.DefaultHeartbeatTimeout and
		// its neighbours).
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: cfg.LocalID, Address: trans.LocalAddr()})
		ps = append(ps, parts{cfg, logs, store, snaps, trans})
	}
	conf := raft.Configuration{Servers: servers}
	fsms := make([]*countFSM, 3)
	for i, p := range ps {
		if err := raft.BootstrapCluster(p.cfg, p.logs, p.store, p.snaps, p.trans, conf); err != nil {
			return res, fmt.Errorf("bootstrapping raft: %w", err)
		}
		fsms[i] = &countFSM{}
		r, err := raft.NewRaft(p.cfg, fsms[i], p.logs, p.store, p.snaps, p.trans)
		if err != nil {
			return res, fmt.Errorf("starting raft: %w", err)
		}
		nodes[i].r = r
	}
	var leader *raft.Raft
	deadline := time.Now().Add(30 * time.Second)
	for leader == nil {
		for _, n := range nodes {
			if n.r.State() == raft.Leader {
				leader = n.r
			}
		}
		if leader != nil {
			break
		}
		if time.Now().After(deadline) {
			return res, errors.New("no raft leader within 30s")
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := leader.Barrier(10 * time.Second).Error(); err != nil {
		return res, fmt.Errorf("raft barrier: %w", err)
	}

	entry := payload(0)
	var (
		count   atomic.Int64
		stop    atomic.Bool
		firstEr firstError
		wg      sync.WaitGroup
		latMu   sync.Mutex
		lats    []float64
	)
	cpu0 := selfCPU()
	start := time.Now()
	end := start.Add(d)
	for w := 0; w < inflight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for !stop.Load() && ctx.Err() == nil {
				t := time.Now()
				if err := leader.Apply(entry, 10*time.Second).Error(); err != nil {
					firstEr.set(err)
					return
				}
				if time.Now().After(end) {
					break
				}
				cur.Store(count.Add(1))
				if len(mine) < 4096 {
					mine = append(mine, float64(time.Since(t))/1e6)
				}
			}
			latMu.Lock()
			lats = append(lats, mine...)
			latMu.Unlock()
		}()
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(end)):
	}
	stop.Store(true)
	wg.Wait()
	res.Seconds = d.Seconds()
	res.Applies = count.Load()
	res.Rate = float64(res.Applies) / res.Seconds
	res.CPUs = selfCPU() - cpu0
	res.P50ms = percentile(lats, 0.50)
	res.P99ms = percentile(lats, 0.99)
	if err := firstEr.get(); err != nil {
		return res, fmt.Errorf("raft apply: %w", err)
	}
	return res, ctx.Err()
}
