package fsm

import (
	"bytes"
	"fmt"
	"testing"
)

// benchBatch returns a batch of n mutations shaped like production traffic:
// a third inserts, a third starts, a third successful finishes.
func benchBatch(n int) *CommitBatch {
	b := &CommitBatch{Epoch: 1, Time: baseTime}
	for i := 0; i < n; i++ {
		id := taskID(i)
		switch i % 3 {
		case 0:
			b.Mutations = append(b.Mutations, Mutation{Insert: &Task{
				ID: id, Key: "key-" + id,
				Template: Template{
					Pool: "default", Kind: "email.send", Payload: make([]byte, 100),
					MaxAttempts: 5, Backoff: Backoff{Initial: 1e9, Max: 300e9, Jitter: 0.2},
					Tags: []KV{{K: "traceparent", V: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
				},
				Status: StatusQueued, SubmittedAt: baseTime,
			}})
		case 1:
			b.Mutations = append(b.Mutations, start(id, 1, lease(1, uint64(i+1))))
		case 2:
			b.Mutations = append(b.Mutations, Mutation{Finish: &Finish{ID: id, Lease: lease(1, uint64(i)), Status: StatusSucceeded, Output: make([]byte, 50), At: baseTime}})
		}
	}
	return b
}

func BenchmarkEncodeCommitBatch1000(b *testing.B) {
	batch := benchBatch(1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeCommitBatch(batch); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeEntry1000(b *testing.B) {
	data, err := EncodeCommitBatch(benchBatch(1000))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeEntry(data); err != nil {
			b.Fatal(err)
		}
	}
}

// hotPathBatch returns a batch of n mutations like those a busy leader
// commits: in turn an insert (26-character ULID, 256-byte payload, the
// defaults the engine resolves), the start of an attempt and a successful
// finish.
func hotPathBatch(n int) *CommitBatch {
	b := &CommitBatch{Epoch: 3, Time: baseTime, Mutations: make([]Mutation, 0, n)}
	for i := 0; i < n; i++ {
		id := taskID(i)
		at := baseTime + Instant(i)
		switch i % 3 {
		case 0:
			b.Mutations = append(b.Mutations, Mutation{Insert: &Task{
				ID: id,
				Template: Template{
					Pool: "default", Kind: "bench.noop", Payload: make([]byte, 256),
					MaxAttempts: 3, Backoff: Backoff{Initial: 1e9, Max: 300e9, Jitter: 0.2},
				},
				RunAt: at, Status: StatusQueued, SubmittedAt: at, UpdatedAt: at,
			}})
		case 1:
			b.Mutations = append(b.Mutations, Mutation{Start: &Start{ID: id, Attempt: 1, Lease: lease(3, uint64(i)), Worker: "worker-0001", At: at}})
		case 2:
			b.Mutations = append(b.Mutations, Mutation{Finish: &Finish{ID: id, Lease: lease(3, uint64(i)), Status: StatusSucceeded, At: at}})
		}
	}
	return b
}

func BenchmarkEncodeHotPath1000(b *testing.B) {
	batch := hotPathBatch(1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeCommitBatch(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeHotPath1000 decodes into a reused batch, as Apply does.
func BenchmarkDecodeHotPath1000(b *testing.B) {
	data, err := EncodeCommitBatch(hotPathBatch(1000))
	if err != nil {
		b.Fatal(err)
	}
	var batch CommitBatch
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := decodeCommitBatch(data[1:], &batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidate1000 is the structural check alone, which DecodeEntry
// runs before the generated decoder reads the body.
func BenchmarkValidate1000(b *testing.B) {
	data, err := EncodeCommitBatch(benchBatch(1000))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := validate(data[1:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyTaskLifecycle applies, per iteration, 4 entries of 1000
// mutations each: insert 1000 tasks, start them, finish them, purge them.
// The table holds 100k other tasks.
func BenchmarkApplyTaskLifecycle(b *testing.B) {
	s := New()
	index := uint64(1)
	s.Apply(index, 1, bumpEntry(b, 1))
	apply := func(ms []Mutation) {
		index++
		data, err := EncodeCommitBatch(&CommitBatch{Epoch: 1, Time: baseTime, Mutations: ms})
		if err != nil {
			b.Fatal(err)
		}
		if resp := s.Apply(index, 1, data); resp != nil {
			b.Fatal(resp)
		}
	}
	for i := 0; i < 100; i++ {
		ms := make([]Mutation, 1000)
		for j := range ms {
			ms[j] = insert(fmt.Sprintf("bg-%03d-%04d", i, j), "default", "")
		}
		apply(ms)
	}
	// Pre-encode the entries of each round.
	const rounds = 8
	var entries [rounds][4][]byte
	var leases uint64
	for r := 0; r < rounds; r++ {
		var ins, st, fin, pg []Mutation
		for j := 0; j < 1000; j++ {
			id := fmt.Sprintf("zz-%d-%04d", r, j)
			leases++
			m := insert(id, "default", "key-"+id)
			ins = append(ins, m)
			st = append(st, start(id, 1, lease(1, leases)))
			fin = append(fin, finish(id, lease(1, leases), StatusSucceeded))
			pg = append(pg, purge(id))
		}
		for k, ms := range [][]Mutation{ins, st, fin, pg} {
			data, err := EncodeCommitBatch(&CommitBatch{Epoch: 1, Time: baseTime, Mutations: ms})
			if err != nil {
				b.Fatal(err)
			}
			entries[r][k] = data
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	// Purged tasks are gone, so a later round can insert and start them
	// again with the same ids and lease tokens.
	for i := 0; b.Loop(); i++ {
		for _, data := range entries[i%rounds] {
			index++
			if resp := s.Apply(index, 1, data); resp != nil {
				b.Fatal(resp)
			}
		}
	}
}

func BenchmarkSnapshot100k(b *testing.B) {
	s := New()
	s.Apply(1, 1, bumpEntry(b, 1))
	for i := 0; i < 100; i++ {
		ms := make([]Mutation, 1000)
		for j := range ms {
			ms[j] = insert(fmt.Sprintf("bg-%03d-%04d", i, j), "default", fmt.Sprintf("k-%d-%d", i, j))
		}
		data, _ := EncodeCommitBatch(&CommitBatch{Epoch: 1, Time: baseTime, Mutations: ms})
		if resp := s.Apply(uint64(i+2), 1, data); resp != nil {
			b.Fatal(resp)
		}
	}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if _, err := s.View().WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
		if err := New().Restore(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}
