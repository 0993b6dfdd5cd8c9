package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runLocal runs scripts/run-local.sh (make run) with BIN bin, its ports
// from base, and its temporary directory under tmp.
func runLocal(t *testing.T, bin string, base int, tmp string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	cmd := exec.Command("bash", "../../scripts/run-local.sh")
	cmd.Env = append(os.Environ(), "BIN="+bin, fmt.Sprintf("CRONOQ_RUN_BASE=%d", base), "TMPDIR="+tmp)
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	defer close(done)
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// freeBase returns a base whose nine ports of make run (base+10..base+32)
// nothing listens on at the moment.
func freeBase(t *testing.T) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.N(20000)
		free := true
		for i := 1; i <= 3 && free; i++ {
			for j := range 3 {
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i*10+j))
				if err != nil {
					free = false
					break
				}
				_ = ln.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

// make run refuses to start when one of its ports is taken, naming it.
func TestRunLocalPortTaken(t *testing.T) {
	t.Parallel()
	base := freeBase(t)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+20))
	require.NoError(t, err)
	defer ln.Close()
	tmp := t.TempDir()
	out, err := runLocal(t, "/bin/false", base, tmp)
	require.Error(t, err)
	require.Contains(t, out, fmt.Sprintf("make run: port %d on 127.0.0.1 is in use", base+20))
	require.Contains(t, out, "CRONOQ_RUN_BASE")
	left, _ := filepath.Glob(filepath.Join(tmp, "cronoq-run.*"))
	require.Empty(t, left)
}

// make run stops when a node fails to start, with the end of its log, and
// stops the others and removes its directory.
func TestRunLocalNodeFails(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	// A stand-in for the binary: node2 fails at once, the other nodes wait
	// to be stopped, and no API ever answers.
	fake := filepath.Join(tmp, "cronoq")
	require.NoError(t, os.WriteFile(fake, []byte(`#!/bin/sh
case "$*" in
*"-node-id node2"*) echo "starting node: listening on 127.0.0.1: address already in use" >&2; exit 1 ;;
agent*) exec sleep 60 ;;
health*) echo "cronoq: checking health: no node reachable at $3: connection refused" >&2; exit 1 ;;
esac
exit 1
`), 0o700))
	start := time.Now()
	out, err := runLocal(t, fake, freeBase(t), tmp)
	require.Error(t, err)
	require.Less(t, time.Since(start), 30*time.Second, "the sleeping nodes were stopped")
	require.Contains(t, out, "make run: node2 exited at start; the end of its log")
	require.Contains(t, out, "address already in use")
	require.Contains(t, out, "==> stopped; removed")
	left, _ := filepath.Glob(filepath.Join(tmp, "cronoq-run.*"))
	require.Empty(t, left)
}
