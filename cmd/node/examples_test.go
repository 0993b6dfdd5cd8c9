package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const examplesDir = "../../docs/examples"

// The three server configurations of docs/examples parse, and form one
// cluster: distinct ids and addresses, the same join list naming every
// gossip address, three expected servers.
func TestExampleServerConfigs(t *testing.T) {
	t.Parallel()
	var gossip []string
	seen := map[string]bool{}
	var join []string
	for _, name := range []string{"server1.hcl", "server2.hcl", "server3.hcl"} {
		cfg, err := parseAgent(t, "-config", filepath.Join(examplesDir, name))
		require.NoError(t, err, name)
		id := strings.TrimSuffix(name, ".hcl")
		require.Equal(t, id, cfg.nodeID)
		require.Equal(t, 3, cfg.bootstrapExpect)
		for _, a := range []string{cfg.httpAddr, cfg.raftAddr, cfg.gossipAddr, cfg.dataDir} {
			require.False(t, seen[a], "%s: %s used twice", name, a)
			seen[a] = true
		}
		gossip = append(gossip, cfg.gossipAddr)
		if join == nil {
			join = cfg.join
		}
		require.Equal(t, join, cfg.join, name)
		require.Len(t, cfg.poolBlocks, 2, name)
		for _, b := range cfg.poolBlocks {
			_, err := b.config(cfg.engineConfig().Pools[b.Name])
			require.NoError(t, err, "%s: pool %s", name, b.Name)
		}
	}
	require.ElementsMatch(t, gossip, join)
}

// The worker's systemd unit runs a command line the worker accepts.
func TestExampleWorkerUnit(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(examplesDir, "cronoq-worker.service"))
	require.NoError(t, err)
	unit := strings.ReplaceAll(string(b), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindStringSubmatch(unit)
	require.NotNil(t, m)
	words := shellWords(t, m[1])
	require.Equal(t, "worker", words[1])
	// Started with its context already ended: everything up to connecting
	// (flags, handlers, work directory) is checked, then it stops.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	args := append(words[1:], "-workdir", t.TempDir(), "-addr", unusedAddr(t))
	r := runCLIContext(ctx, "", args...)
	require.NotEqual(t, exitUsage, r.code, r.stderr)
	require.NotContains(t, r.stderr, "flag")
	require.Contains(t, r.stderr, "worker started")

	b, err = os.ReadFile(filepath.Join(examplesDir, "cronoq-server.service"))
	require.NoError(t, err)
	require.Contains(t, string(b), "ExecStart=/usr/local/bin/cronoq agent -config /etc/cronoq/server.hcl")
}
