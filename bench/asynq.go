package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const asynqQueue = "bench"

// asynqSys is asynq on a single Redis server with the append-only file on,
// fsync'd on every write (always) or once a second (everysec), with the
// library's defaults or, tuned (asynq-*-tuned), with those of asynqTuning.
type asynqSys struct {
	env    *Env
	fsync  string // always | everysec
	tuned  bool
	dir    string
	redis  *proc
	addr   string
	rc     *redis.Client // enqueue side
	wc     *redis.Client // worker side, with the completion hook
	client *asynq.Client
	srv    *asynq.Server
	logf   *os.File
}

func (s *asynqSys) Name() string {
	if s.tuned {
		return "asynq-" + s.fsync + "-tuned"
	}
	return "asynq-" + s.fsync
}
func (s *asynqSys) Batches() bool { return false }
func (s *asynqSys) Copies() int   { return 1 }
func (s *asynqSys) Durability() string {
	if s.fsync == "always" {
		return "acknowledged after Redis appended the write to its AOF and fsync'd it (appendfsync always) on the one server"
	}
	return "acknowledged before fsync: Redis fsyncs its AOF once a second (appendfsync everysec), so a crash loses up to ~1 s of acknowledged writes; one server"
}

// asynqTuning is what the asynq-*-tuned systems change from asynq's
// defaults, for low latency and high throughput, after the libraries'
// documentation:
//
//   - TaskCheckInterval: asynq's Config docs: "the interval between checks
//     for new tasks to process when all queues are empty", default 1 s,
//     "setting this value too low may add significant load to redis". The
//     processor dequeues one task at a time and, finding every queue
//     empty, sleeps TaskCheckInterval/2 plus a random jitter below
//     TaskCheckInterval (processor.go), so the idle wait averages the
//     interval; asynq enforces no minimum but replaces zero or a negative
//     value by 1 s. Tuned: -asynq-tuned-task-check-interval (10 ms), about
//     100 dequeue scripts a second when idle.
//   - Concurrency: the benchmark's -concurrency (1024) like every system.
//   - go-redis PoolSize of the server's client: go-redis's default is
//     10 × GOMAXPROCS, and at most PoolSize commands are in flight (a
//     semaphore of PoolSize in its pool): with 1024 handlers each sending
//     its "done" script, the default makes them queue for a connection.
//     Tuned: one connection per handler (-asynq-tuned-pool, 0 = the
//     concurrency), so every completion is in flight at once and Redis
//     takes them in one event-loop pass (one AOF write, and one fsync with
//     appendfsync always, for all of them).
//
// The enqueue side's client has 64 connections in every asynq row (one
// per W2 caller, -w2-concurrency); asynq has no batch enqueue.
type asynqTuning struct {
	taskCheckInterval time.Duration
	pool              int
}

// serverPool is the go-redis PoolSize of the server's (worker side)
// client; 0 is go-redis's default.
func (s *asynqSys) serverPool() int {
	if !s.tuned {
		return 0
	}
	if p := s.env.opts.asynqTuned.pool; p > 0 {
		return p
	}
	return s.env.opts.concurrency
}

func (s *asynqSys) taskCheck() time.Duration {
	if s.tuned {
		return s.env.opts.asynqTuned.taskCheckInterval
	}
	return s.env.opts.asynqCheck
}

// Settings are the settings of the system, default and changed, for the
// report.
func (s *asynqSys) Settings() []Setting {
	check := s.taskCheck().String() + " (idle wait TaskCheckInterval/2 + jitter in [0, TaskCheckInterval); no minimum, 0 or less means 1s)"
	if s.taskCheck() == time.Second {
		check = "1s (default; idle wait 0.5–1.5 s)"
	}
	pool := "10 × GOMAXPROCS (go-redis default)"
	if p := s.serverPool(); p > 0 {
		pool = strconv.Itoa(p) + " (one per handler slot)"
	}
	return []Setting{
		{"Redis", fmt.Sprintf("--appendonly yes --appendfsync %s --save \"\" (no RDB snapshots), defaults otherwise", s.fsync)},
		{"Concurrency", strconv.Itoa(s.env.opts.concurrency)},
		{"Queues", "one (" + asynqQueue + ")"},
		{"TaskCheckInterval", check},
		{"server go-redis PoolSize", pool},
		{"client go-redis PoolSize", fmt.Sprintf("%d (W2's default callers; go-redis default 10 × GOMAXPROCS)", asynqClientPool)},
		{"DelayedTaskCheckInterval / HealthCheckInterval / JanitorInterval", "5s / 15s / 8s (defaults; no scheduled, retried or retained tasks here)"},
		{"enqueue", "Client.Enqueue with a TaskID (asynq has no batch enqueue)"},
	}
}

// asynqClientPool is the go-redis PoolSize of the enqueue side.
const asynqClientPool = 64

func (s *asynqSys) Config() string { return settingsString(s.Settings()) }

func (s *asynqSys) ServerPIDs() []int {
	if s.redis == nil {
		return nil
	}
	return []int{s.redis.pid}
}

func (s *asynqSys) Start(ctx context.Context, dir string) error {
	s.dir = dir
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	rdir := dir + "/redis"
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return err
	}
	lf := logPath(dir, "redis")
	s.redis, err = s.env.procs.start("redis-"+s.fsync, lf, nil, nil, s.env.redisBin,
		"--port", strconv.Itoa(ports[0]),
		"--bind", "127.0.0.1",
		"--dir", rdir,
		"--appendonly", "yes",
		"--appendfsync", s.fsync,
		"--save", "",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", "",
	)
	if err != nil {
		return err
	}
	s.rc = redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: asynqClientPool})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if done, werr := s.redis.exited(); done {
			return fmt.Errorf("redis-server exited: %v: %s", werr, tailFile(lf, 1500))
		}
		if err := s.rc.Ping(ctx).Err(); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("redis-server not answering within 30s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.client = asynq.NewClientFromRedisClient(s.rc)
	if s.logf, err = os.Create(logPath(dir, "asynq")); err != nil {
		return err
	}
	return nil
}

func asynqTask(seq int) (*asynq.Task, []asynq.Option) {
	return asynq.NewTask("noop", payload(seq)), []asynq.Option{asynq.Queue(asynqQueue), asynq.TaskID("s" + strconv.Itoa(seq))}
}

func (s *asynqSys) Enqueue(ctx context.Context, seq int) error {
	t, opts := asynqTask(seq)
	_, err := s.client.EnqueueContext(ctx, t, opts...)
	return err
}

func (s *asynqSys) EnqueueBatch(context.Context, []int) error { return errNoBatch }

// StartWorkers starts an asynq server. A completion counts when the reply to
// asynq's "done" script (which removes the task from the active list) comes
// back: Redis answers only after the AOF write (and, with appendfsync
// always, its fsync). A go-redis hook on the server's connection sees it.
func (s *asynqSys) StartWorkers(ctx context.Context, h Hooks) error {
	s.wc = redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: s.serverPool()})
	s.wc.AddHook(doneHook{done: h.Done})
	s.srv = asynq.NewServerFromRedisClient(s.wc, asynq.Config{
		Concurrency:       s.env.opts.concurrency,
		Queues:            map[string]int{asynqQueue: 1},
		TaskCheckInterval: s.taskCheck(),
		ShutdownTimeout:   10 * time.Second,
		Logger:            fileLogger{log.New(s.logf, "", log.LstdFlags|log.Lmicroseconds)},
		LogLevel:          asynq.WarnLevel,
	})
	handler := asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		if seq, err := seqOf(t.Payload()); err == nil {
			h.Start(seq)
		}
		return nil
	})
	if err := s.srv.Start(handler); err != nil {
		return fmt.Errorf("starting asynq server: %w", err)
	}
	return nil
}

func (s *asynqSys) StopWorkers() error {
	if s.srv == nil {
		return nil
	}
	s.srv.Shutdown()
	s.srv = nil
	err := s.wc.Close()
	s.wc = nil
	return err
}

func (s *asynqSys) Completed(ctx context.Context) (int64, error) {
	info, err := asynq.NewInspectorFromRedisClient(s.rc).GetQueueInfo(asynqQueue)
	if err != nil {
		return 0, err
	}
	return int64(info.ProcessedTotal - info.FailedTotal), nil
}

func (s *asynqSys) Stop() error {
	errs := []error{s.StopWorkers()}
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
	if s.rc != nil {
		s.rc.Close()
		s.rc = nil
	}
	if s.logf != nil {
		s.logf.Close()
	}
	errs = append(errs, s.env.procs.stop(s.redis, syscall.SIGTERM, 30*time.Second))
	s.redis = nil
	return errors.Join(errs...)
}

// doneHook reports the tasks whose "done" script succeeded. That script
// takes five keys: …:active, …:lease, …:t:<id>, …:processed:<date>,
// …:processed, and the task id as its first argument.
type doneHook struct{ done func(int) }

func (doneHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (doneHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h doneHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || cmd.Err() != nil {
			return err
		}
		a := cmd.Args()
		if len(a) < 9 {
			return nil
		}
		if name, _ := a[0].(string); name != "evalsha" && name != "eval" {
			return nil
		}
		if nk, ok := a[2].(int); !ok || nk != 5 {
			return nil
		}
		k1, _ := a[3].(string)
		k3, _ := a[5].(string)
		k4, _ := a[6].(string)
		if !strings.HasSuffix(k1, ":active") || !strings.Contains(k3, ":t:") || !strings.Contains(k4, ":processed:") {
			return nil
		}
		id, _ := a[8].(string)
		if seq, err := strconv.Atoi(strings.TrimPrefix(id, "s")); err == nil && strings.HasPrefix(id, "s") {
			h.done(seq)
		}
		return nil
	}
}

// fileLogger is asynq's logger, writing to the cell's log.
type fileLogger struct{ l *log.Logger }

func (f fileLogger) Debug(args ...any) { f.l.Print(append([]any{"DEBUG "}, args...)...) }
func (f fileLogger) Info(args ...any)  { f.l.Print(append([]any{"INFO "}, args...)...) }
func (f fileLogger) Warn(args ...any)  { f.l.Print(append([]any{"WARN "}, args...)...) }
func (f fileLogger) Error(args ...any) { f.l.Print(append([]any{"ERROR "}, args...)...) }
func (f fileLogger) Fatal(args ...any) { f.l.Fatal(append([]any{"FATAL "}, args...)...) }
