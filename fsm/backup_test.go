package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// backupOf returns the backup file of h's state.
func backupOf(t *testing.T, s *State, index, term uint64) []byte {
	t.Helper()
	snap := snapshotBytes(t, s)
	hdr := BackupHeader{Index: index, Term: term, Created: time.Unix(1700000000, 5).UTC(), Size: uint64(len(snap))}
	b, err := io.ReadAll(NewBackupReader(hdr, bytes.NewReader(snap)))
	require.NoError(t, err)
	require.Equal(t, hdr.FileSize(), int64(len(b)))
	return b
}

func backupState(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(insert(taskID(1), "p", "k1"), insert(taskID(2), "p", ""), putSchedule("nightly"))
	h.ok(start(taskID(1), 1, 1<<32|1))
	h.ok(start(taskID(2), 1, 1<<32|2), finish(taskID(2), 1<<32|2, StatusSucceeded))
	h.ok(tombstone("n9", false))
	return h
}

func TestBackupRoundTrip(t *testing.T) {
	h := backupState(t)
	file := backupOf(t, h.s, 42, 7)

	s, info, err := ReadBackup(bytes.NewReader(file), LogVersion)
	require.NoError(t, err)
	require.Equal(t, uint64(42), info.Index)
	require.Equal(t, uint64(7), info.Term)
	require.Equal(t, time.Unix(1700000000, 5).UTC(), info.Created)
	require.Equal(t, sha256.Sum256(file[:len(file)-BackupTrailerSize]), info.Checksum)
	require.Equal(t, 2, info.Tasks)
	require.Equal(t, 1, info.Schedules)
	require.Equal(t, h.s.Epoch(), info.Epoch)
	require.Equal(t, h.s.AppliedIndex(), info.Applied)
	require.Equal(t, h.s.Hash(), s.Hash(), "the state read back is the state saved")
}

func TestBackupDamageRefused(t *testing.T) {
	h := backupState(t)
	file := backupOf(t, h.s, 42, 7)
	check := func(name string, data []byte, words ...string) {
		t.Helper()
		_, _, err := ReadBackup(bytes.NewReader(data), LogVersion)
		require.Error(t, err, name)
		require.ErrorIs(t, err, ErrBadBackup, name)
		for _, w := range words {
			require.Contains(t, err.Error(), w, name)
		}
	}
	// Every single flipped byte is caught, wherever it is.
	for i := range file {
		bad := bytes.Clone(file)
		bad[i] ^= 0x20
		_, _, err := ReadBackup(bytes.NewReader(bad), LogVersion)
		require.ErrorIs(t, err, ErrBadBackup, "byte %d flipped", i)
	}
	body := BackupHeaderSize + 40
	flipped := bytes.Clone(file)
	flipped[body] ^= 1
	check("flipped body byte", flipped, "checksum mismatch")
	flipped = bytes.Clone(file)
	flipped[len(file)-1] ^= 1
	check("flipped checksum byte", flipped, "checksum mismatch")
	for _, n := range []int{0, 3, BackupHeaderSize - 1, BackupHeaderSize, body, len(file) - BackupTrailerSize, len(file) - 1} {
		check("truncated", file[:n], "truncated")
	}
	check("not a backup", append([]byte("PK\x03\x04"), file[4:]...), "not a cronoq snapshot file")
	check("trailing data", append(bytes.Clone(file), 0), "after the checksum")
	version := bytes.Clone(file)
	version[5] = 9
	check("format version", version, "format version 9")

	// A well-formed file whose snapshot does not decode: the checksum is
	// right, the contents are not.
	snap := snapshotBytes(t, h.s)
	snap[0] = 'X'
	hdr := BackupHeader{Index: 1, Term: 1, Size: uint64(len(snap))}
	bad, err := io.ReadAll(NewBackupReader(hdr, bytes.NewReader(snap)))
	require.NoError(t, err)
	check("undecodable snapshot", bad, "does not decode")
}

func TestBackupReaderChecksBodyLength(t *testing.T) {
	snap := []byte("0123456789")
	_, err := io.ReadAll(NewBackupReader(BackupHeader{Size: 11}, bytes.NewReader(snap)))
	require.ErrorIs(t, err, ErrBadBackup)
	_, err = io.ReadAll(NewBackupReader(BackupHeader{Size: 9}, bytes.NewReader(snap)))
	require.ErrorIs(t, err, ErrBadBackup)
}

func TestBackupNeedsNewerVersion(t *testing.T) {
	h := newHarness(t)
	h.ok(putWorkflow("01J0000000000000000000WF01", ""))
	file := backupOf(t, h.s, 5, 1)
	_, _, err := ReadBackup(bytes.NewReader(file), 1)
	require.ErrorIs(t, err, ErrNewerVersion)
}

// Rebase moves the epoch forward only and replaces the tombstones.
func TestRebase(t *testing.T) {
	h := backupState(t)
	s, _, err := ReadBackup(bytes.NewReader(backupOf(t, h.s, 42, 7)), LogVersion)
	require.NoError(t, err)
	require.Error(t, s.Rebase(0, 1, 1, nil))
	require.NoError(t, s.Rebase(9, 3, 100, []Tombstone{{NodeID: "n2", At: baseTime}}))
	require.Equal(t, uint64(9), s.Epoch())
	require.Equal(t, uint64(3), s.EpochTerm())
	require.Equal(t, uint64(100), s.AppliedIndex())
	require.False(t, s.Tombstoned("n9"))
	require.True(t, s.Tombstoned("n2"))
	// A batch of another epoch is fenced, one of the new epoch applies.
	resp := s.Apply(101, 3, batchEntry(t, 1, ready(taskID(1))))
	require.True(t, errors.Is(resp.(error), ErrStaleEpoch), "%v", resp)
	require.Nil(t, s.Apply(101, 3, batchEntry(t, 9, retry(taskID(1), 1<<32|1, baseTime+5))))
}
