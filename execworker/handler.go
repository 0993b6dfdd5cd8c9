package execworker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/cronoq/cronoq/client"
)

// Environment variables set for every command.
const (
	EnvTaskID  = "CRONOQ_TASK_ID"
	EnvAttempt = "CRONOQ_ATTEMPT"
	EnvLease   = "CRONOQ_LEASE"
	EnvPool    = "CRONOQ_POOL"
	EnvKind    = "CRONOQ_KIND"
)

// Config configures a Handler.
type Config struct {
	// Command is the shell command line run for each attempt. Required.
	Command string
	// Root is the directory under which each attempt gets its working
	// directory, Root/<task id>. Required; it must exist.
	Root string
	// MaxOutput bounds stdout in bytes (default DefaultMaxOutput).
	MaxOutput int
	// KillGrace is the time between SIGTERM and SIGKILL when an attempt is
	// stopped (default DefaultKillGrace).
	KillGrace time.Duration
	// Env holds extra KEY=VALUE pairs for every command; the CRONOQ_*
	// variables override them.
	Env []string
	// Logger reports what cannot be returned as a task's outcome (default:
	// none).
	Logger hclog.Logger
}

// Handler is a client.Handler running a shell command for each attempt.
type Handler struct {
	cfg Config
}

var _ client.Handler = (*Handler)(nil)

// New returns a Handler for cfg.
func New(cfg Config) (*Handler, error) {
	if strings.TrimSpace(cfg.Command) == "" {
		return nil, errors.New("creating exec handler: Command is empty")
	}
	if cfg.Root == "" {
		return nil, errors.New("creating exec handler: Root is empty")
	}
	if cfg.MaxOutput < 0 {
		return nil, fmt.Errorf("creating exec handler: MaxOutput %d is negative", cfg.MaxOutput)
	}
	if cfg.KillGrace < 0 {
		return nil, fmt.Errorf("creating exec handler: KillGrace %s is negative", cfg.KillGrace)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("creating exec handler: resolving Root: %w", err)
	}
	cfg.Root = root
	if cfg.MaxOutput == 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Env = append([]string(nil), cfg.Env...)
	return &Handler{cfg: cfg}, nil
}

// Work runs the command for one attempt of a task.
//
// The command runs in a fresh directory Root/<task id> (mode 0700), removed
// afterwards, with the payload on stdin and CRONOQ_TASK_ID, CRONOQ_ATTEMPT,
// CRONOQ_LEASE, CRONOQ_POOL and CRONOQ_KIND in its environment. Its stdout is
// the output. Exit status 75 is a retryable failure; any other failure
// (another exit status, a fatal signal, too much output, a task id unfit for a
// directory name) is permanent. When ctx ends the command's process group is
// stopped and a retryable error is returned.
func (h *Handler) Work(ctx context.Context, job *client.Job) ([]byte, error) {
	task := job.Task
	dir, err := WorkDir(h.cfg.Root, task.ID)
	if err != nil {
		return nil, client.Permanent(fmt.Errorf("preparing work directory: %w", err))
	}
	if err := freshDir(dir); err != nil {
		// Most likely a full or read-only disk on this worker: another
		// attempt may do better.
		return nil, fmt.Errorf("preparing work directory: %w", err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			h.cfg.Logger.Warn("removing work directory", "task", task.ID, "dir", dir, "error", err)
		}
	}()

	env := append(append([]string(nil), h.cfg.Env...),
		EnvTaskID+"="+task.ID,
		EnvAttempt+"="+strconv.Itoa(job.Attempt),
		EnvLease+"="+strconv.FormatUint(job.Lease, 10),
		EnvPool+"="+task.Pool,
		EnvKind+"="+task.Kind,
	)
	res, err := Run(ctx, Spec{
		Command:   h.cfg.Command,
		Payload:   task.Payload,
		Env:       env,
		Dir:       dir,
		MaxOutput: h.cfg.MaxOutput,
		KillGrace: h.cfg.KillGrace,
	})
	var xe *ExitError
	switch {
	case err == nil:
		return res.Output, nil
	case errors.Is(err, ErrOutputTooLarge):
		return nil, client.Permanent(err)
	case errors.As(err, &xe) && xe.Retryable():
		return nil, client.Retryable(err, 0)
	case xe != nil:
		return nil, client.Permanent(err)
	default:
		// Stopped because ctx ended, or the shell could not be started
		// (for instance fork failing under memory pressure).
		return nil, err
	}
}

// freshDir creates dir with mode 0700, replacing whatever a previous attempt
// left there.
func freshDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing leftover %s: %w", dir, err)
		}
		err = os.Mkdir(dir, 0o700)
	}
	if err != nil {
		return err
	}
	// The process umask may have cleared bits of 0700; make it exact.
	return os.Chmod(dir, 0o700)
}
