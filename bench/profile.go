package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"
)

// profiler is a system whose servers can be profiled while a workload runs.
type profiler interface {
	// DebugURLs are the base URLs of the servers by name: the CPU profile
	// is read from /debug/pprof/profile?seconds=N, then the Prometheus
	// metrics from /metrics and the allocation profile from
	// /debug/pprof/allocs.
	DebugURLs() map[string]string
}

// debugClienter is a profiler whose servers need their own HTTP client
// (TLS with a client certificate).
type debugClienter interface {
	DebugClient() *http.Client
}

// startProfiles records CPU profiles of sys's servers and of this process
// (clients and workers) for d, writing <name>.cpu.pprof files into dir. It
// returns at once; wait blocks until every profile is written.
func startProfiles(ctx context.Context, sys System, dir string, d time.Duration) (wait func() error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	if p, ok := sys.(profiler); ok {
		secs := max(1, int(d/time.Second))
		hc := http.DefaultClient
		if dc, ok := sys.(debugClienter); ok {
			hc = dc.DebugClient()
		}
		for name, base := range p.DebugURLs() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fetchTo(ctx, hc, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), filepath.Join(dir, name+".cpu.pprof"), d); err != nil {
					fail(fmt.Errorf("profiling %s: %w", name, err))
					return
				}
				if err := fetchTo(ctx, hc, base+"/metrics", filepath.Join(dir, name+".metrics.txt"), 0); err != nil {
					fail(fmt.Errorf("reading the metrics of %s: %w", name, err))
				}
				// Allocations since the node started (go tool pprof
				// -sample_index=alloc_space).
				if err := fetchTo(ctx, hc, base+"/debug/pprof/allocs", filepath.Join(dir, name+".allocs.pprof"), 0); err != nil {
					fail(fmt.Errorf("reading the allocation profile of %s: %w", name, err))
				}
			}()
		}
	}
	f, err := os.Create(filepath.Join(dir, "bench.cpu.pprof"))
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fail(fmt.Errorf("profiling this process: %w", err))
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fail(fmt.Errorf("writing this process's profile: %w", err))
			}
		}()
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// fetchTo writes the body of a GET of url to path, allowing d more than
// the usual 30 s for the answer.
func fetchTo(ctx context.Context, hc *http.Client, url, path string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// maybeProfile starts the profiles of a cell when -profile asks for them,
// into profiles/<system>-<workload>[-<rate>]-r<run>/ of the results.
func maybeProfile(ctx context.Context, env *Env, sys System, res *CellResult) (wait func() error) {
	if env.opts.profile <= 0 {
		return func() error { return nil }
	}
	name := fmt.Sprintf("%s-%s", res.System, res.Workload)
	if res.Rate > 0 {
		name += fmt.Sprintf("-%d", res.Rate)
	}
	dir := filepath.Join(env.runDir, "profiles", fmt.Sprintf("%s-r%d", name, res.Run))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() error { return fmt.Errorf("profiles: %w", err) }
	}
	env.prog.note("recording %s CPU profiles into %s", env.opts.profile, dir)
	return startProfiles(ctx, sys, dir, env.opts.profile)
}
