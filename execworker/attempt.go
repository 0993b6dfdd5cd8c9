package execworker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cronoq/cronoq/client"
)

// DefaultMaxSpawn bounds a spawn file when Config.MaxSpawn is unset.
const DefaultMaxSpawn = 16 << 20

// attemptFiles are the files an attempt gets besides its working
// directory: the directory of its dependencies' outputs and its spawn
// file, both inside a private directory removed after the attempt.
type attemptFiles struct {
	dir     string // the private directory holding the others
	depsDir string
	spawn   string
}

// newAttemptFiles creates the attempt's private directory under root, with
// an empty dependencies directory and an empty spawn file in it.
func newAttemptFiles(root string) (*attemptFiles, error) {
	dir, err := os.MkdirTemp(root, ".cronoq-attempt-")
	if err != nil {
		return nil, fmt.Errorf("creating the attempt's directory: %w", err)
	}
	a := &attemptFiles{dir: dir, depsDir: filepath.Join(dir, "deps"), spawn: filepath.Join(dir, "spawn")}
	if err := os.Mkdir(a.depsDir, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating the dependencies directory: %w", err)
	}
	f, err := os.OpenFile(a.spawn, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating the spawn file: %w", err)
	}
	return a, nil
}

func (a *attemptFiles) remove() error { return os.RemoveAll(a.dir) }

// depFileNames names the file of each dependency of job: its step name,
// or its id when it has none or when another dependency has the same step
// name. A dependency listed twice gets one file; the second is "".
func depFileNames(deps []client.Dependency) ([]string, error) {
	steps := make(map[string]int, len(deps))
	for _, d := range deps {
		if d.Step != "" {
			steps[d.Step]++
		}
	}
	names := make([]string, len(deps))
	used := make(map[string]string, len(deps)) // file name -> dependency id
	for i, d := range deps {
		name, what := d.ID, "id"
		if d.Step != "" && steps[d.Step] == 1 {
			name, what = d.Step, "step name"
		}
		if reason := unsafeSegment(name); reason != "" {
			return nil, fmt.Errorf("dependency %s: its %s %q is not a safe file name: %s", d.ID, what, name, reason)
		}
		if prev, dup := used[name]; dup {
			if prev == d.ID {
				continue
			}
			return nil, fmt.Errorf("dependencies %s and %s both map to the file name %q", prev, d.ID, name)
		}
		used[name] = d.ID
		names[i] = name
	}
	return names, nil
}

// writeDeps writes the output of each dependency of job into dir, reading
// the outputs the grant left out from the cluster. An error wrapping a
// *client.PermanentError cannot be cured by another attempt.
func writeDeps(ctx context.Context, job *client.Job, dir string) error {
	names, err := depFileNames(job.Dependencies)
	if err != nil {
		return client.Permanent(err)
	}
	for i, d := range job.Dependencies {
		if names[i] == "" {
			continue
		}
		out := d.Output
		if d.OutputOmitted {
			if out, err = job.DependencyOutput(ctx, d.ID); err != nil {
				if errors.Is(err, client.ErrNotFound) {
					// Purged: no later attempt will find it either.
					return client.Permanent(err)
				}
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, names[i]), out, 0o600); err != nil {
			return fmt.Errorf("writing the output of dependency %s: %w", names[i], err)
		}
	}
	return nil
}

// SpawnSpec is one line of a spawn file: a step, and whether it is the
// continuation (which depends on every other step of the file).
type SpawnSpec struct {
	StepSpec
	Then bool `json:"then"`
}

// ParseSpawn reads the lines of a spawn file: one JSON object (a SpawnSpec)
// per line; blank lines are skipped. It returns the children in file order
// and the continuation, if a line has "then": true. An error names the
// line (counted from 1).
func ParseSpawn(data []byte) (children []client.Step, then *client.Step, err error) {
	thenLine := 0
	for n, line := range bytes.Split(data, []byte("\n")) {
		lineNo := n + 1
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var sp SpawnSpec
		if err := DecodeJSON(line, &sp); err != nil {
			return nil, nil, fmt.Errorf("spawn file line %d: %w", lineNo, err)
		}
		st, err := sp.Step()
		if err != nil {
			return nil, nil, fmt.Errorf("spawn file line %d: %w", lineNo, err)
		}
		if !sp.Then {
			children = append(children, st)
			continue
		}
		if thenLine != 0 {
			return nil, nil, fmt.Errorf("spawn file line %d: a second \"then\" step (the first is on line %d)", lineNo, thenLine)
		}
		thenLine = lineNo
		then = &st
	}
	return children, then, nil
}

// readSpawn reads and parses the spawn file at path, at most max bytes of
// it. A missing file spawns nothing.
func readSpawn(path string, max int) ([]client.Step, *client.Step, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the spawn file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the spawn file: %w", err)
	}
	if len(data) > max {
		return nil, nil, fmt.Errorf("spawn file exceeds %d bytes", max)
	}
	if strings.TrimSpace(string(data)) == "" {
		return nil, nil, nil
	}
	return ParseSpawn(data)
}
