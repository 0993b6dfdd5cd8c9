package execworker

import (
	"errors"
	"fmt"
	"path/filepath"
	"unicode"
	"unicode/utf8"
)

// ErrUnsafeID is wrapped by every error WorkDir returns for a task id that
// cannot safely be used as a directory name.
var ErrUnsafeID = errors.New("task id is not a safe path segment")

// maxSegment is the longest file name most Linux file systems accept
// (NAME_MAX).
const maxSegment = 255

// WorkDir returns the working directory of task id under root: root/id.
//
// The id must be exactly one path segment that stays inside root: it is
// refused (with an error wrapping ErrUnsafeID) when it is empty, "." or "..",
// longer than 255 bytes, not valid UTF-8, or contains '/', '\\', NUL or any
// other control character. WorkDir does not touch the file system.
func WorkDir(root, id string) (string, error) {
	if root == "" {
		return "", errors.New("work directory root is empty")
	}
	if reason := unsafeSegment(id); reason != "" {
		return "", fmt.Errorf("%w: %q: %s", ErrUnsafeID, id, reason)
	}
	cleanRoot := filepath.Clean(root)
	dir := filepath.Join(cleanRoot, id)
	// Defence in depth: whatever the checks above missed, the result must be
	// a direct child of root.
	if filepath.Dir(dir) != cleanRoot || filepath.Base(dir) != id {
		return "", fmt.Errorf("%w: %q: escapes the root", ErrUnsafeID, id)
	}
	return dir, nil
}

// unsafeSegment returns why id is not one safe path segment, or "" when it
// is.
func unsafeSegment(id string) string {
	switch {
	case id == "":
		return "empty"
	case id == "." || id == "..":
		return "refers to a directory itself"
	case len(id) > maxSegment:
		return fmt.Sprintf("longer than %d bytes", maxSegment)
	case !utf8.ValidString(id):
		return "not valid UTF-8"
	}
	for _, r := range id {
		switch {
		case r == '/' || r == '\\':
			return "contains a path separator"
		case r == 0:
			return "contains NUL"
		case unicode.IsControl(r):
			return "contains a control character"
		}
	}
	return ""
}
