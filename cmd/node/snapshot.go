package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/fsm"
)

// snapshotCommands are the subcommands of `cronoq operator snapshot`.
var snapshotCommands = map[string]command{
	"save":    {Summary: "Save a backup of the cluster's state to a file", Run: runSnapshotSave},
	"restore": {Summary: "Replace the cluster's state with a backup file", Run: runSnapshotRestore},
}

func init() {
	operatorCommands["snapshot"] = command{Summary: "Save and restore backups of the cluster's state", Run: runSnapshot}
}

func runSnapshot(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq operator snapshot", snapshotCommands, args)
}

// defaultSnapshotTimeout is -rpc-timeout of the snapshot commands when not
// given: a large state takes a while to travel.
const defaultSnapshotTimeout = 10 * time.Minute

// snapshotFileJSON is what both commands say of a backup file.
type snapshotFileJSON struct {
	File      string `json:"file"`
	Size      int64  `json:"size"`
	Index     uint64 `json:"index"`
	Term      uint64 `json:"term"`
	Created   string `json:"created"`
	SHA256    string `json:"sha256"`
	Tasks     int    `json:"tasks"`
	Schedules int    `json:"schedules"`
	Workflows int    `json:"workflows"`
	Pools     int    `json:"pools"`
}

type snapshotRestoreJSON struct {
	snapshotFileJSON
	RevokedLeases int    `json:"revoked_leases"`
	RaftIndex     uint64 `json:"raft_index"`
	Epoch         uint64 `json:"epoch"`
}

// checkSnapshotFile reads the backup file at path whole and checks it: its
// checksum, its length and that the state inside decodes.
func checkSnapshotFile(path string) (fsm.BackupInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return fsm.BackupInfo{}, err
	}
	defer f.Close()
	_, info, err := fsm.ReadBackup(f, fsm.LogVersion)
	if err != nil {
		return info, err
	}
	return info, nil
}

func runSnapshotSave(ctx context.Context, s stdio, args []string) error {
	c := newCmd("operator snapshot save", "cronoq operator snapshot save FILE", `
Save a backup of the cluster's state to FILE: a consistent snapshot taken by
the leader, holding every write acknowledged before the command (tasks with
their statuses, payloads and outputs, workflows, recurring schedules, pool and
kind settings). The Raft configuration (which servers form the cluster) is not
part of it.

The backup is written to FILE.tmp, read back and checked (SHA-256 checksum,
length, the state decodes), then renamed to FILE. It prints the size, the Raft
index and term of the snapshot and its checksum. -rpc-timeout bounds the whole
transfer (default 10m here).

The file holds every task's payload and output: keep it as safe as the
cluster's data directories.

JSON output: {"file", "size", "index", "term", "created", "sha256", "tasks",
"schedules", "workflows", "pools"}`)
	cf := snapshotClientFlags(c)
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	path := c.args[0]
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("saving the snapshot: %w", err)
	}
	_, err = dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (int64, error) { return cl.SnapshotSave(ctx, f) })
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("saving the snapshot: %w", cerr)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	info, err := checkSnapshotFile(tmp)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("the snapshot received does not check out, nothing saved: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("saving the snapshot: %w", err)
	}
	out := fileJSON(path, info)
	if cf.out.json() {
		return writeJSON(s.Stdout, out)
	}
	_, err = fmt.Fprintf(s.Stdout, "saved snapshot %s: %d bytes, raft index %d, term %d, sha256 %s\n"+
		"  %d tasks, %d schedules, %d workflows, %d pools; taken %s\n",
		path, out.Size, out.Index, out.Term, out.SHA256, out.Tasks, out.Schedules, out.Workflows, out.Pools, out.Created)
	return err
}

func runSnapshotRestore(ctx context.Context, s stdio, args []string) error {
	c := newCmd("operator snapshot restore", "cronoq operator snapshot restore FILE", `
Replace the whole state of the cluster with the backup in FILE (made by
'cronoq operator snapshot save'), on a new cluster or on a running one. The
Raft configuration is kept: the cluster's servers stay as they are.

FILE is checked whole before anything is sent (checksum, length, the state
decodes), and the leader checks it again before applying it: a damaged or
truncated file is refused and changes nothing.

What the cluster had before is gone, and every task runs from the state of
the backup: attempts that were running in it lose their lease (they are
retried, or fail when they have no attempt left), and a worker still holding
a lease from before the restore is refused. The leader serves again at a new,
higher epoch. -rpc-timeout bounds the whole transfer (default 10m here).

JSON output: {"file", "size", "index", "term", "created", "sha256", "tasks",
"schedules", "workflows", "pools", "revoked_leases", "raft_index", "epoch"}`)
	cf := snapshotClientFlags(c)
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	path := c.args[0]
	if _, err := checkSnapshotFile(path); err != nil {
		return fmt.Errorf("cannot restore %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cannot restore %s: %w", path, err)
	}
	defer f.Close()
	res, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.RestoreResult, error) {
		return cl.SnapshotRestore(ctx, f)
	})
	if err != nil {
		return err
	}
	out := snapshotRestoreJSON{
		snapshotFileJSON: snapshotFileJSON{
			File: path, Size: res.Size, Index: res.Index, Term: res.Term,
			Created: res.Created.UTC().Format(time.RFC3339Nano), SHA256: hex.EncodeToString(res.Checksum),
			Tasks: res.Tasks, Schedules: res.Schedules, Workflows: res.Workflows, Pools: res.Pools,
		},
		RevokedLeases: res.RevokedLeases, RaftIndex: res.RaftIndex, Epoch: res.Epoch,
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, out)
	}
	epoch := "not known yet (the leader was not serving again when the restore answered)"
	if out.Epoch != 0 {
		epoch = fmt.Sprint(out.Epoch)
	}
	_, err = fmt.Fprintf(s.Stdout, "restored snapshot %s (raft index %d, term %d, taken %s, sha256 %s)\n"+
		"  %d tasks, %d schedules, %d workflows, %d pools; %d running attempts lost their lease\n"+
		"  the cluster's state now starts at raft index %d; leader epoch %s\n",
		path, out.Index, out.Term, out.Created, out.SHA256,
		out.Tasks, out.Schedules, out.Workflows, out.Pools, out.RevokedLeases, out.RaftIndex, epoch)
	return err
}

// snapshotClientFlags registers the client flags, with a longer default
// -rpc-timeout.
func snapshotClientFlags(c *cmd) *clientFlags {
	cf := c.clientFlags()
	cf.rpcTimeout = defaultSnapshotTimeout
	if f := c.fs.Lookup("rpc-timeout"); f != nil {
		f.DefValue = f.Value.String()
	}
	return cf
}

func fileJSON(path string, info fsm.BackupInfo) snapshotFileJSON {
	return snapshotFileJSON{
		File: path, Size: info.FileSize(), Index: info.Index, Term: info.Term,
		Created: info.Created.UTC().Format(time.RFC3339Nano), SHA256: hex.EncodeToString(info.Checksum[:]),
		Tasks: info.Tasks, Schedules: info.Schedules, Workflows: info.Workflows, Pools: info.Pools,
	}
}
