package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
)

// nodeIDFile is the name of the file in the data directory that holds the
// node's identity.
const nodeIDFile = "node-id"

// maxNodeIDLen bounds node ids so that they fit the gossip metadata.
const maxNodeIDLen = 64

// IdentityMismatchError is returned when a data directory that belongs to one
// node is started with another node id.
type IdentityMismatchError struct {
	DataDir   string
	Stored    string // the id recorded in the data directory
	Requested string // the id asked for
}

func (e *IdentityMismatchError) Error() string {
	return fmt.Sprintf("data dir %s belongs to node %q, refusing to start it as node %q "+
		"(use the original -node-id or an empty data dir)", e.DataDir, e.Stored, e.Requested)
}

// validateNodeID checks that id is usable as a raft server id and gossip name.
func validateNodeID(id string) error {
	if id == "" {
		return errors.New("must not be empty")
	}
	if len(id) > maxNodeIDLen {
		return fmt.Errorf("%d bytes is longer than %d", len(id), maxNodeIDLen)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("%q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

// generateNodeID returns a random UUID-shaped id.
func generateNodeID() (string, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("generating node id: %w", err)
	}
	return u.String(), nil
}

// resolveNodeID returns the identity of the node that owns dataDir. On first
// start the requested id (or a generated one when requested is empty) is
// written to dataDir/node-id; later starts read it back, and a requested id
// that differs from the stored one is refused with an
// *IdentityMismatchError.
func resolveNodeID(dataDir, requested string) (string, error) {
	path := filepath.Join(dataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		stored := strings.TrimSpace(string(b))
		if err := validateNodeID(stored); err != nil {
			return "", fmt.Errorf("reading node id from %s: %w", path, err)
		}
		if requested != "" && requested != stored {
			return "", &IdentityMismatchError{DataDir: dataDir, Stored: stored, Requested: requested}
		}
		return stored, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("reading node id: %w", err)
	}

	id := requested
	if id == "" {
		if id, err = generateNodeID(); err != nil {
			return "", err
		}
	}
	if err := validateNodeID(id); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	if err := writeFileAtomic(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("writing node id: %w", err)
	}
	return id, nil
}

// writeFileAtomic writes data to path through a synced temporary file and a
// rename, then syncs the directory, so that a crash leaves either no file or
// the whole file.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
