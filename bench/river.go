package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverArgs are the job args: the 256-byte payload as a JSON string.
type riverArgs struct {
	P string `json:"p"`
}

func (riverArgs) Kind() string { return "noop" }

// riverNoop does nothing but report that it began the job.
type riverNoop struct {
	river.WorkerDefaults[riverArgs]
	onStart atomic.Pointer[func(seq int)]
}

func (w *riverNoop) Work(_ context.Context, job *river.Job[riverArgs]) error {
	if f := w.onStart.Load(); f != nil {
		if seq, err := seqOf([]byte(job.Args.P)); err == nil {
			(*f)(seq)
		}
	}
	return nil
}

// riverSys is River on a single PostgreSQL server with synchronous_commit=on
// and fsync=on, with the library's defaults or, tuned (river-tuned), with
// the settings of riverTuning.
type riverSys struct {
	env    *Env
	tuned  bool
	worker *riverNoop
	dir    string
	pg     *proc
	data   string // the cell's PostgreSQL dir, when outside the cell dir
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	logf   *os.File
	unsub  func()
	readWG sync.WaitGroup
	strays int
}

func (s *riverSys) Name() string {
	if s.tuned {
		return "river-tuned"
	}
	return "river"
}
func (s *riverSys) Batches() bool { return true }
func (s *riverSys) Copies() int   { return 1 }
func (s *riverSys) Durability() string {
	return "acknowledged once the PostgreSQL transaction commits with synchronous_commit=on, fsync=on: WAL flushed on the one server"
}

// riverTuning is what river-tuned changes from River's defaults, for low
// latency and high throughput, after River's own documentation:
//
//   - FetchCooldown and FetchPollInterval: the Config docs say throughput
//     is limited by FetchCooldown (default 100 ms; River enforces at least
//     1 ms, FetchCooldownMin) and that FetchPollInterval (default 1 s,
//     at least 1 ms, FetchPollIntervalMin, and not below FetchCooldown) is
//     the fallback when no LISTEN/NOTIFY wakes the producer. River's own
//     benchmark (cmd/river/riverbench) sets 2 ms and 20 ms, "much better
//     than the client's default values".
//   - MaxWorkers: the benchmark's -concurrency (1024) like every system;
//     riverbench found "roughly 1k workers was most optimal" (at most
//     10,000, QueueNumWorkersMax).
//   - pgx pool: pgxpool's default is max(4, NumCPU) connections; the
//     default rows already use -river-pool (32). Tuned, the pool holds one
//     connection per concurrent caller of W2 (-w2-concurrency, 64) plus 16
//     for River's own users (LISTEN notifier, producer fetches, completer,
//     leader elector, maintenance), so that no insert waits for a
//     connection: -river-tuned-pool.
//
// The completer is not configurable in River v0.51.2: the batch completer
// (NewBatchCompleter, no options) completes up to 5,000 jobs per UPDATE,
// on a 50 ms tick once 100 are waiting or every 250 ms otherwise.
type riverTuning struct {
	fetchCooldown, fetchPollInterval time.Duration
	pool                             int
}

// riverMinInterval is River's minimum for FetchCooldown and
// FetchPollInterval (river.FetchCooldownMin, river.FetchPollIntervalMin).
const riverMinInterval = time.Millisecond

func (s *riverSys) poolSize() int {
	if s.tuned {
		return s.env.opts.riverTuned.pool
	}
	return s.env.opts.riverConns
}

// Settings are the settings of the system, default and changed, for the
// report.
func (s *riverSys) Settings() []Setting {
	fc, fp := "100ms (default)", "1s (default)"
	pool := fmt.Sprintf("%d (-river-pool; pgxpool's own default is max(4, NumCPU))", s.poolSize())
	if s.tuned {
		t := s.env.opts.riverTuned
		fc, fp = t.fetchCooldown.String()+" (min 1ms)", t.fetchPollInterval.String()+" (min 1ms, ≥ FetchCooldown)"
		pool = fmt.Sprintf("%d (-river-tuned-pool)", s.poolSize())
	}
	return []Setting{
		{"PostgreSQL", "initdb defaults plus synchronous_commit=on, fsync=on, full_page_writes=on, max_connections=200"},
		{"pgx pool_max_conns", pool},
		{"Queues", fmt.Sprintf("one (default) with MaxWorkers %d (max 10,000)", s.env.opts.concurrency)},
		{"FetchCooldown", fc},
		{"FetchPollInterval", fp},
		{"PollOnly", "false (default: LISTEN/NOTIFY wakes the producers)"},
		{"completer", "batch completer (default; not configurable in v0.51.2: ≤5,000 jobs per UPDATE, 50 ms tick, flush at ≥100 waiting or every 250 ms)"},
		{"JobTimeout / MaxAttempts", "1m / 25 (defaults)"},
		{"enqueue", "Insert / InsertMany, each call one transaction"},
	}
}

func (s *riverSys) Config() string { return settingsString(s.Settings()) }

func (s *riverSys) ServerPIDs() []int {
	if s.pg == nil {
		return nil
	}
	return []int{s.pg.pid}
}

func (s *riverSys) Start(ctx context.Context, dir string) error {
	s.dir = dir
	tmpl, err := s.env.pgTemplate(ctx)
	if err != nil {
		return err
	}
	data := filepath.Join(s.env.pgRoot, filepath.Base(dir), "pg")
	if err := os.MkdirAll(filepath.Dir(data), 0o755); err != nil {
		return err
	}
	s.data = filepath.Dir(data)
	if out, err := exec.CommandContext(ctx, "cp", "-a", tmpl, data).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the PostgreSQL template: %w: %s", err, out)
	}
	port, p, err := s.env.startPostgres(ctx, data, logPath(dir, "postgres"))
	if err != nil {
		return err
	}
	s.pg = p
	s.pool, err = pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&pool_max_conns=%d", port, s.poolSize()))
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	if s.logf, err = os.Create(logPath(dir, "river")); err != nil {
		return err
	}
	workers := river.NewWorkers()
	s.worker = &riverNoop{}
	river.AddWorker(workers, s.worker)
	cfg := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.env.opts.concurrency}},
		Workers: workers,
		Logger:  slog.New(slog.NewTextHandler(s.logf, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if s.tuned {
		cfg.FetchCooldown = s.env.opts.riverTuned.fetchCooldown
		cfg.FetchPollInterval = s.env.opts.riverTuned.fetchPollInterval
	}
	s.client, err = river.NewClient(riverpgxv5.New(s.pool), cfg)
	if err != nil {
		return fmt.Errorf("creating River client: %w", err)
	}
	return nil
}

func riverArgsOf(seq int) riverArgs { return riverArgs{P: string(payload(seq))} }

func (s *riverSys) Enqueue(ctx context.Context, seq int) error {
	_, err := s.client.Insert(ctx, riverArgsOf(seq), nil)
	return err
}

func (s *riverSys) EnqueueBatch(ctx context.Context, seqs []int) error {
	params := make([]river.InsertManyParams, len(seqs))
	for i, q := range seqs {
		params[i] = river.InsertManyParams{Args: riverArgsOf(q)}
	}
	_, err := s.client.InsertMany(ctx, params)
	return err
}

// StartWorkers starts the River client. A completion counts when River's
// subscription delivers its JobCompleted event, which the batch completer
// sends only after the UPDATE marking the job completed has committed.
func (s *riverSys) StartWorkers(ctx context.Context, h Hooks) error {
	events, unsub := s.client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: 1 << 20,
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	s.unsub = unsub
	s.worker.onStart.Store(&h.Start)
	s.readWG.Add(1)
	go func() {
		defer s.readWG.Done()
		for ev := range events {
			var a riverArgs
			if ev.Job == nil || json.Unmarshal(ev.Job.EncodedArgs, &a) != nil {
				s.strays++
				continue
			}
			seq, err := seqOf([]byte(a.P))
			if err != nil {
				s.strays++
				continue
			}
			h.Done(seq)
		}
	}()
	if err := s.client.Start(context.Background()); err != nil {
		return fmt.Errorf("starting River client: %w", err)
	}
	return nil
}

func (s *riverSys) StopWorkers() error {
	if s.unsub == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.client.Stop(ctx)
	s.unsub()
	s.unsub = nil
	s.readWG.Wait()
	if err != nil {
		return fmt.Errorf("stopping River client: %w", err)
	}
	return nil
}

func (s *riverSys) Completed(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&n)
	return n, err
}

func (s *riverSys) Stop() error {
	var errs []error
	if s.client != nil {
		errs = append(errs, s.StopWorkers())
	}
	if s.pool != nil {
		s.pool.Close()
		s.pool = nil
	}
	if s.logf != nil {
		s.logf.Close()
	}
	// SIGINT is PostgreSQL's fast shutdown.
	errs = append(errs, s.env.procs.stop(s.pg, syscall.SIGINT, 30*time.Second))
	s.pg = nil
	if s.data != "" && !s.env.opts.keep {
		_ = os.RemoveAll(s.data)
	}
	return errors.Join(errs...)
}

// pgTemplate returns a data dir made once per benchmark run: initdb as the
// postgres user, then River's migrations. Each cell starts from a copy.
func (e *Env) pgTemplate(ctx context.Context) (string, error) {
	if e.pgTmpl != "" {
		return e.pgTmpl, nil
	}
	base := filepath.Join(e.pgRoot, "pg-template")
	data := filepath.Join(base, "pg")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return "", fmt.Errorf("creating PostgreSQL template dir: %w", err)
	}
	for _, d := range []string{base, data} {
		if err := os.Chown(d, int(e.pgCred.Uid), int(e.pgCred.Gid)); err != nil {
			return "", fmt.Errorf("handing %s to the postgres user: %w", d, err)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(e.pgBin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-instructions")
	cmd.Dir = base
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.pgCred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb (as postgres): %w: %s", err, out)
	}
	port, p, err := e.startPostgres(ctx, data, logPath(base, "postgres"))
	if err != nil {
		return "", err
	}
	migErr := func() error {
		pool, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
		if err != nil {
			return err
		}
		defer pool.Close()
		m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
		if err != nil {
			return err
		}
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
		return err
	}()
	stopErr := e.procs.stop(p, syscall.SIGINT, 30*time.Second)
	if migErr != nil {
		return "", fmt.Errorf("running River's migrations: %w", migErr)
	}
	if stopErr != nil {
		return "", stopErr
	}
	e.pgTmpl = data
	return data, nil
}

// startPostgres runs postgres as the postgres user on a free loopback port
// and waits until it accepts connections.
func (e *Env) startPostgres(ctx context.Context, data, logFile string) (int, *proc, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, nil, err
	}
	port := ports[0]
	p, err := e.procs.start("postgres", logFile, e.pgCred, nil, filepath.Join(e.pgBin, "postgres"),
		"-D", data,
		"-c", fmt.Sprintf("port=%d", port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "synchronous_commit=on",
		"-c", "fsync=on",
		"-c", "full_page_writes=on",
		"-c", "max_connections=200",
	)
	if err != nil {
		return 0, nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port)
	for {
		if done, werr := p.exited(); done {
			return 0, nil, fmt.Errorf("postgres exited: %v: %s", werr, tailFile(logFile, 1500))
		}
		pool, err := pgxpool.New(ctx, url)
		if err == nil {
			err = pool.Ping(ctx)
			pool.Close()
			if err == nil {
				return port, p, nil
			}
		}
		if time.Now().After(deadline) {
			_ = e.procs.stop(p, syscall.SIGINT, 10*time.Second)
			return 0, nil, fmt.Errorf("postgres not accepting connections within 60s: %v: %s", err, tailFile(logFile, 1500))
		}
		select {
		case <-ctx.Done():
			_ = e.procs.stop(p, syscall.SIGINT, 10*time.Second)
			return 0, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
