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
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronoq/cronoq/client"
)

// Environment variables set for every command.
const (
	EnvTaskID  = "CRONOQ_TASK_ID"
	EnvAttempt = "CRONOQ_ATTEMPT"
	EnvLease   = "CRONOQ_LEASE"
	EnvPool    = "CRONOQ_POOL"
	EnvKind    = "CRONOQ_KIND"
	// EnvPrincipal is the accessor of the ACL token that submitted the
	// task (empty without ACLs).
	EnvPrincipal = "CRONOQ_PRINCIPAL"
	// EnvDepsDir names a directory holding one file per dependency of the
	// task, its output, named by the dependency's step name (else its id).
	EnvDepsDir = "CRONOQ_DEPS_DIR"
	// EnvSpawn names a file the command may write steps to, one JSON
	// object per line, spawned with its success.
	EnvSpawn = "CRONOQ_SPAWN"
	// EnvTraceparent and EnvTracestate carry the W3C trace context of the
	// attempt's span, when the task is traced and the worker traces (set
	// only then), for the command to continue the trace.
	EnvTraceparent = "TRACEPARENT"
	EnvTracestate  = "TRACESTATE"
)

// Config configures a Handler.
type Config struct {
	// Command is the shell command line run for each attempt. Required.
	Command string
	// Root is the directory under which each attempt gets its working
	// directory, Root/<task id>, and a private directory
	// Root/.cronoq-attempt-* holding its dependencies directory and spawn
	// file. Required; it must exist.
	Root string
	// MaxOutput bounds stdout in bytes (default DefaultMaxOutput).
	MaxOutput int
	// KillGrace is the time between SIGTERM and SIGKILL when an attempt is
	// stopped (default DefaultKillGrace).
	KillGrace time.Duration
	// MaxSpawn bounds the spawn file in bytes (default DefaultMaxSpawn).
	MaxSpawn int
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
	if cfg.MaxSpawn < 0 {
		return nil, fmt.Errorf("creating exec handler: MaxSpawn %d is negative", cfg.MaxSpawn)
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
	if cfg.MaxSpawn == 0 {
		cfg.MaxSpawn = DefaultMaxSpawn
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
// CRONOQ_LEASE, CRONOQ_POOL, CRONOQ_KIND, CRONOQ_PRINCIPAL, CRONOQ_DEPS_DIR
// and CRONOQ_SPAWN (and, when the attempt is traced, TRACEPARENT and
// TRACESTATE) in its environment (see the package documentation). Its stdout is the
// output. Exit status 75 is a retryable failure; any other failure (another
// exit status, a fatal signal, too much output, a task id unfit for a
// directory name, a malformed spawn file) is permanent. When ctx ends the
// command's process group is stopped and a retryable error is returned.
//
// After a success, the steps of the spawn file are given to job.Spawn and
// job.Then, to be committed with the success.
func (h *Handler) Work(ctx context.Context, job *client.Job) ([]byte, error) {
	res, err := h.work(ctx, job)
	if err != nil {
		return nil, err
	}
	if len(res.children) > 0 {
		job.Spawn(res.children...)
	}
	if res.then != nil {
		job.Then(*res.then)
	}
	return res.output, nil
}

// traceEnv is TRACEPARENT (and TRACESTATE) of the span ctx carries, none
// without a span.
func traceEnv(ctx context.Context) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	env := []string{EnvTraceparent + "=" + carrier.Get("traceparent")}
	if ts := carrier.Get("tracestate"); ts != "" {
		env = append(env, EnvTracestate+"="+ts)
	}
	return env
}

// result is what a successful attempt leaves: its output and the steps it
// spawns.
type result struct {
	output   []byte
	children []client.Step
	then     *client.Step
}

func (h *Handler) work(ctx context.Context, job *client.Job) (result, error) {
	task := job.Task
	dir, err := WorkDir(h.cfg.Root, task.ID)
	if err != nil {
		return result{}, client.Permanent(fmt.Errorf("preparing work directory: %w", err))
	}
	if err := freshDir(dir); err != nil {
		// Most likely a full or read-only disk on this worker: another
		// attempt may do better.
		return result{}, fmt.Errorf("preparing work directory: %w", err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			h.cfg.Logger.Warn("removing work directory", "task", task.ID, "dir", dir, "error", err)
		}
	}()
	files, err := newAttemptFiles(h.cfg.Root)
	if err != nil {
		return result{}, err
	}
	defer func() {
		if err := files.remove(); err != nil {
			h.cfg.Logger.Warn("removing the attempt's files", "task", task.ID, "dir", files.dir, "error", err)
		}
	}()
	if err := writeDeps(ctx, job, files.depsDir); err != nil {
		return result{}, fmt.Errorf("preparing %s: %w", EnvDepsDir, err)
	}

	env := append(append([]string(nil), h.cfg.Env...),
		EnvTaskID+"="+task.ID,
		EnvAttempt+"="+strconv.Itoa(job.Attempt),
		EnvLease+"="+strconv.FormatUint(job.Lease, 10),
		EnvPool+"="+task.Pool,
		EnvKind+"="+task.Kind,
		EnvPrincipal+"="+task.Principal,
		EnvDepsDir+"="+files.depsDir,
		EnvSpawn+"="+files.spawn,
	)
	env = append(env, traceEnv(ctx)...)
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
	case errors.Is(err, ErrOutputTooLarge):
		return result{}, client.Permanent(err)
	case errors.As(err, &xe) && xe.Retryable():
		return result{}, client.Retryable(err, 0)
	case xe != nil:
		return result{}, client.Permanent(err)
	default:
		// Stopped because ctx ended, or the shell could not be started
		// (for instance fork failing under memory pressure).
		return result{}, err
	}
	children, then, err := readSpawn(files.spawn, h.cfg.MaxSpawn)
	if err != nil {
		// The command succeeded: running it again would not mend what
		// it wrote.
		return result{}, client.Permanent(err)
	}
	return result{output: res.Output, children: children, then: then}, nil
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
