package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

// Backup file format (`cronoq operator snapshot save`), all integers
// big-endian:
//
//	magic     "CRQB"
//	version   uint16: the backup format (1)
//	index     uint64: raft index of the snapshot
//	term      uint64: raft term of the snapshot
//	created   int64:  when it was taken (Unix nanoseconds, leader clock)
//	size      uint64: length of the state snapshot that follows
//	snapshot  size bytes: the state's snapshot (see View.WriteTo)
//	checksum  32 bytes: SHA-256 of every byte before it
//
// The raft configuration is not part of it: a restore keeps the servers of
// the cluster it is restored into.

const (
	backupMagic   = "CRQB"
	backupVersion = 1
	// BackupHeaderSize is the length of a backup file's header.
	BackupHeaderSize = len(backupMagic) + 2 + 8 + 8 + 8 + 8
	// BackupTrailerSize is the length of a backup file's checksum.
	BackupTrailerSize = sha256.Size
)

// ErrBadBackup is returned for a backup file that cannot be used: not a
// backup, an unknown format version, truncated, a checksum that does not
// match its contents, or a state snapshot inside that does not decode.
var ErrBadBackup = errors.New("bad snapshot file")

func badBackup(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadBackup, fmt.Sprintf(format, args...))
}

// BackupHeader is what a backup file says of the snapshot it holds.
type BackupHeader struct {
	Index   uint64    // raft index of the snapshot
	Term    uint64    // raft term of the snapshot
	Created time.Time // when the snapshot was taken
	Size    uint64    // length of the state snapshot
}

// FileSize is the length of the whole backup file.
func (h BackupHeader) FileSize() int64 {
	return int64(BackupHeaderSize) + int64(h.Size) + BackupTrailerSize
}

func (h BackupHeader) encode() []byte {
	b := make([]byte, 0, BackupHeaderSize)
	b = append(b, backupMagic...)
	b = binary.BigEndian.AppendUint16(b, backupVersion)
	b = binary.BigEndian.AppendUint64(b, h.Index)
	b = binary.BigEndian.AppendUint64(b, h.Term)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Created.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, h.Size)
	return b
}

// NewBackupReader returns the backup file of the state snapshot body,
// described by h, as a stream: the header, h.Size bytes of body, then the
// checksum. It fails (ErrBadBackup) if body holds fewer or more than h.Size
// bytes.
func NewBackupReader(h BackupHeader, body io.Reader) io.Reader {
	sum := sha256.New()
	hdr := h.encode()
	sum.Write(hdr)
	return &backupReader{
		hdr:  hdr,
		body: io.TeeReader(io.LimitReader(body, int64(h.Size)), sum),
		rest: body,
		size: h.Size,
		sum:  sum,
	}
}

type backupReader struct {
	hdr     []byte
	body    io.Reader // limited to size, hashed
	rest    io.Reader // the unlimited body, to check that it ends
	size    uint64
	read    uint64
	sum     hash.Hash
	trailer []byte // set once the body is read
	err     error
}

func (r *backupReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(r.hdr) > 0 {
		n := copy(p, r.hdr)
		r.hdr = r.hdr[n:]
		return n, nil
	}
	if r.trailer == nil {
		n, err := r.body.Read(p)
		r.read += uint64(n)
		switch {
		case err == io.EOF && r.read < r.size:
			r.err = badBackup("state snapshot ended after %d of %d bytes", r.read, r.size)
			return n, r.err
		case err == io.EOF:
			var one [1]byte
			if m, _ := io.ReadFull(r.rest, one[:]); m > 0 {
				r.err = badBackup("state snapshot longer than its %d bytes", r.size)
				return n, r.err
			}
			r.trailer = r.sum.Sum(nil)
			if n > 0 {
				return n, nil
			}
		case err != nil:
			r.err = fmt.Errorf("reading the state snapshot: %w", err)
			return n, r.err
		default:
			return n, nil
		}
	}
	if len(r.trailer) == 0 {
		r.err = io.EOF
		return 0, io.EOF
	}
	n := copy(p, r.trailer)
	r.trailer = r.trailer[n:]
	return n, nil
}

// BackupInfo describes a backup file that was read and checked.
type BackupInfo struct {
	BackupHeader
	Checksum [sha256.Size]byte // the file's SHA-256 trailer

	// What the state snapshot holds.
	LogVersion uint16 // the log format its records need
	Epoch      uint64
	Applied    uint64 // the log index its state had applied
	Tasks      int
	Schedules  int
	Workflows  int
	Pools      int
}

// ReadBackup reads a whole backup file from r, checks it and returns the
// state it holds (a new State that applies log formats up to version) with
// what the file says of it. Nothing is trusted before the end: the
// checksum must match every byte, the length must be the header's, and the
// state snapshot must decode. A file that fails any of these is refused
// with an error wrapping ErrBadBackup (or ErrNewerVersion for a state that
// needs a newer log format than version); an error of r is returned as is,
// wrapped.
func ReadBackup(r io.Reader, version uint16) (*State, BackupInfo, error) {
	var info BackupInfo
	var hdr [BackupHeaderSize]byte
	if n, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if n >= len(backupMagic) && string(hdr[:len(backupMagic)]) != backupMagic {
				return nil, info, badBackup("not a cronoq snapshot file")
			}
			return nil, info, badBackup("truncated: %d bytes, shorter than the header", n)
		}
		return nil, info, fmt.Errorf("reading the snapshot header: %w", err)
	}
	if string(hdr[:len(backupMagic)]) != backupMagic {
		return nil, info, badBackup("not a cronoq snapshot file")
	}
	if v := binary.BigEndian.Uint16(hdr[4:]); v != backupVersion {
		return nil, info, badBackup("snapshot file format version %d, this release reads version %d", v, backupVersion)
	}
	info.Index = binary.BigEndian.Uint64(hdr[6:])
	info.Term = binary.BigEndian.Uint64(hdr[14:])
	info.Created = time.Unix(0, int64(binary.BigEndian.Uint64(hdr[22:]))).UTC()
	info.Size = binary.BigEndian.Uint64(hdr[30:])

	sum := sha256.New()
	sum.Write(hdr[:])
	body := &countingReader{r: io.LimitReader(r, int64(info.Size))}
	tee := io.TeeReader(body, sum)
	s := NewVersion(version)
	decodeErr := s.Restore(tee)
	// Hash whatever the decoder left, so that a damaged file is reported
	// as such rather than as whatever the damage made the decoder see.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return nil, info, fmt.Errorf("reading the state snapshot: %w", err)
	}
	if body.err != nil && !errors.Is(body.err, io.EOF) {
		return nil, info, fmt.Errorf("reading the state snapshot: %w", body.err)
	}
	if uint64(body.n) < info.Size {
		return nil, info, badBackup("truncated: the file ends %d bytes into a state snapshot of %d bytes",
			body.n, info.Size)
	}
	var trailer [sha256.Size]byte
	if n, err := io.ReadFull(r, trailer[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, info, badBackup("truncated: %d of the %d bytes of the checksum", n, sha256.Size)
		}
		return nil, info, fmt.Errorf("reading the snapshot checksum: %w", err)
	}
	var extra [1]byte
	if n, err := r.Read(extra[:]); n > 0 {
		return nil, info, badBackup("data after the checksum")
	} else if err != nil && err != io.EOF {
		return nil, info, fmt.Errorf("reading the end of the snapshot file: %w", err)
	}
	copy(info.Checksum[:], sum.Sum(nil))
	if !bytes.Equal(info.Checksum[:], trailer[:]) {
		return nil, info, badBackup("checksum mismatch: the file is corrupt (SHA-256 %x, the file says %x)",
			info.Checksum, trailer)
	}
	if decodeErr != nil {
		if errors.Is(decodeErr, ErrNewerVersion) {
			return nil, info, decodeErr
		}
		return nil, info, fmt.Errorf("%w: the state snapshot inside does not decode: %w", ErrBadBackup, decodeErr)
	}
	s.mu.RLock()
	t := s.t
	info.LogVersion = t.version()
	info.Epoch, info.Applied = t.epoch, t.applied
	info.Tasks, info.Schedules, info.Workflows, info.Pools = t.tasks.Len(), t.scheds.Len(), t.wfs.Len(), t.settings.Len()
	s.mu.RUnlock()
	return s, info, nil
}

// countingReader counts the bytes read through it and keeps the error.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// Rebase prepares a state that no raft node applies to (one read from a
// backup) to be restored into a running cluster: it sets its epoch and the
// term of that epoch, the log index it has applied, and replaces its
// tombstones (which servers the cluster removed for good, like the raft
// configuration a property of the cluster, not of its data) with tombs.
// The epoch never moves back.
func (s *State) Rebase(epoch, term, applied uint64, tombs []Tombstone) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.t
	if epoch < t.epoch {
		return fmt.Errorf("rebasing the state to epoch %d: it is at epoch %d", epoch, t.epoch)
	}
	for _, tb := range tombs {
		if tb.NodeID == "" || tb.Remove {
			return fmt.Errorf("rebasing the state: invalid tombstone %+v", tb)
		}
	}
	t.epoch, t.epochTerm, t.applied = epoch, term, applied
	t.tombs.Clear(false)
	for i := range tombs {
		tb := tombs[i]
		t.putTombstone(nil, &tb)
	}
	return nil
}
