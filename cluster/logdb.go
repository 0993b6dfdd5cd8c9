package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// A raft log database that is truncated or has garbage in it must stop the
// node with one clear error, not a panic: raft-boltdb and bbolt trust the
// file, so a corrupt page shows up as an index out of range
// (raftboltdb.LastIndex on an empty key), an invalid freelist page, or a
// fault on a page past the end of a truncated file. The file is checked
// before raft reads it, with every panic (and memory fault) of the open and
// of the first reads turned into a *LogStoreCorruptError.
//
// bbolt's own consistency check (Tx.Check) runs on a goroutine of its own
// (bbolt tx.go, Check), where a panic on a corrupt page cannot be
// recovered, so it is not used: the check walks the log bucket's keys and
// reads the first and last entries instead, which touches every branch and
// leaf page of the log.

// LogStoreCorruptError says the raft log database cannot be read. The node
// does not start; moving the file aside lets it rebuild its log from the
// leader.
type LogStoreCorruptError struct {
	Path string
	Err  error
}

func (e *LogStoreCorruptError) Error() string {
	return fmt.Sprintf("raft log database %s is corrupt: %v; stop the node, move the file aside and restart it "+
		"to rebuild its log from the leader (in a single-server cluster the entries after the latest snapshot are lost: "+
		"restore a backup instead), see docs/operations.md#disk-faults", e.Path, e.Err)
}

func (e *LogStoreCorruptError) Unwrap() error { return e.Err }

// openLogStore opens the raft log database at path after checking it.
func openLogStore(path string, noSync bool) (*raftboltdb.BoltStore, error) {
	if err := checkLogDB(path); err != nil {
		return nil, err
	}
	var store *raftboltdb.BoltStore
	err := guardCorruption(path, func() error {
		var err error
		store, err = raftboltdb.New(raftboltdb.Options{
			Path:                    path,
			BoltOptions:             &bbolt.Options{Timeout: time.Second},
			NoSync:                  noSync,
			MsgpackUseNewTimeFormat: true,
		})
		if err != nil {
			if corruptOpenError(err) {
				return &LogStoreCorruptError{Path: path, Err: err}
			}
			return fmt.Errorf("opening raft log store %s: %w", path, err)
		}
		return readLogEnds(path, store)
	})
	if err != nil {
		if store != nil {
			_ = store.Close()
		}
		return nil, err
	}
	return store, nil
}

// corruptOpenError reports whether bbolt refused to open a file because of
// what is in it (rather than a lock held elsewhere or a permission).
func corruptOpenError(err error) bool {
	return errors.Is(err, bbolt.ErrInvalid) || errors.Is(err, bbolt.ErrChecksum) ||
		errors.Is(err, bbolt.ErrVersionMismatch) || err.Error() == "file size too small"
}

// guardCorruption runs fn, turning a panic or a memory fault in it into a
// *LogStoreCorruptError for path.
func guardCorruption(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &LogStoreCorruptError{Path: path, Err: fmt.Errorf("reading it panicked: %v", r)}
		}
	}()
	return fn()
}

// checkLogDB checks an existing raft log database read-only: its size
// against the pages its meta page counts, the keys of the log bucket (8
// bytes each, in increasing order) and the stable store's bucket.
func checkLogDB(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && fi.Size() == 0) {
		return nil // a new database
	}
	if err != nil {
		return fmt.Errorf("checking raft log database: %w", err)
	}
	return guardCorruption(path, func() error {
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
		if err != nil {
			if corruptOpenError(err) {
				return &LogStoreCorruptError{Path: path, Err: err}
			}
			return fmt.Errorf("opening raft log database %s to check it: %w", path, err)
		}
		defer db.Close()
		return db.View(func(tx *bbolt.Tx) error {
			if need := tx.Size(); need > fi.Size() {
				return &LogStoreCorruptError{Path: path,
					Err: fmt.Errorf("truncated: the file has %d bytes, its pages need %d", fi.Size(), need)}
			}
			if logs := tx.Bucket([]byte("logs")); logs != nil {
				var prev []byte
				c := logs.Cursor()
				for k, v := c.First(); k != nil; k, v = c.Next() {
					if len(k) != 8 {
						return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("log key %x is not an index", k)}
					}
					if prev != nil && bytes.Compare(prev, k) >= 0 {
						return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("log keys out of order: %x after %x", k, prev)}
					}
					if len(v) == 0 {
						return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("log entry %x is empty", k)}
					}
					prev = k
				}
			}
			if conf := tx.Bucket([]byte("conf")); conf != nil {
				if err := conf.ForEach(func(k, v []byte) error {
					if len(k) == 0 {
						return errors.New("empty key in the stable store")
					}
					return nil
				}); err != nil {
					return &LogStoreCorruptError{Path: path, Err: err}
				}
			}
			return nil
		})
	})
}

// readLogEnds reads the first and last entries and the stable store's
// keys, as raft does first when it starts.
func readLogEnds(path string, store *raftboltdb.BoltStore) error {
	first, err := store.FirstIndex()
	if err != nil {
		return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("reading the first index: %w", err)}
	}
	last, err := store.LastIndex()
	if err != nil {
		return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("reading the last index: %w", err)}
	}
	if first > last {
		return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("first index %d is after last index %d", first, last)}
	}
	if last > 0 {
		for _, idx := range []uint64{first, last} {
			var l raft.Log
			if err := store.GetLog(idx, &l); err != nil {
				return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("reading entry %d: %w", idx, err)}
			}
			if l.Index != idx {
				return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("entry %d holds index %d", idx, l.Index)}
			}
		}
	}
	for _, key := range [][]byte{[]byte("CurrentTerm"), []byte("LastVoteTerm")} {
		if _, err := store.GetUint64(key); err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
			return &LogStoreCorruptError{Path: path, Err: fmt.Errorf("reading %s: %w", key, err)}
		}
	}
	return nil
}

// newRaft is raft.NewRaft, with a panic of its synchronous part (it reads
// every log entry after the snapshot it restored, and panics on one it
// cannot read: api.go, NewRaft) turned into an error. Nothing of raft runs
// yet when that part panics.
func newRaft(logPath string, rc *raft.Config, fsm raft.FSM, logs raft.LogStore, stable raft.StableStore,
	snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			perr, ok := p.(error)
			if !ok {
				perr = fmt.Errorf("%v", p)
			}
			if isNoSpace(perr) {
				err = fmt.Errorf("raft panicked: %w", perr)
				return
			}
			err = &LogStoreCorruptError{Path: logPath, Err: fmt.Errorf("raft panicked reading it: %w", perr)}
		}
	}()
	return raft.NewRaft(rc, fsm, logs, stable, snaps, trans)
}
