package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A binary built as make build does, with the version stamped by -ldflags,
// reports it in `version` and in `members` (the agent gossips it).
func TestStampedVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const stamp = "v9.8.7-test-3-gabcdef0-dirty"
	bin := filepath.Join(t.TempDir(), "cronoq")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+stamp, "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	out, err = exec.Command(bin, "version").Output()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(out), "cronoq "+stamp+" (go1."), "%s", out)
	out, err = exec.Command(bin, "version", "-o", "json").Output()
	require.NoError(t, err)
	var v struct{ Version string }
	require.NoError(t, json.Unmarshal(out, &v))
	require.Equal(t, stamp, v.Version)

	flags, addr := agentPorts(t)
	agent := exec.Command(bin, append([]string{"agent", "-dev", "-log-level", "warn"}, flags...)...)
	logs := &syncWriter{}
	agent.Stdout, agent.Stderr = logs, logs
	require.NoError(t, agent.Start())
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = agent.Wait()
	}()
	t.Cleanup(func() {
		_ = agent.Process.Kill()
		<-exited
	})
	healthOK(t, addr, 30*time.Second, exited)
	require.Eventually(t, func() bool {
		out, err := exec.Command(bin, "members", "-addr", addr).Output()
		return err == nil && strings.Contains(string(out), stamp)
	}, 10*time.Second, 100*time.Millisecond, "members shows the version; agent log:\n%s", logs.String())
}

// An unstamped build still says something: the module version or commit,
// else "dev" (never the empty string).
func TestUnstampedVersion(t *testing.T) {
	t.Parallel()
	require.Equal(t, "", version)
	require.NotEmpty(t, binaryVersion())
	require.NotContains(t, binaryVersion(), "(devel)")
}
