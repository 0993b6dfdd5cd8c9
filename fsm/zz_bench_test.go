package fsm

import (
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func mkBatch() *CommitBatch {
	b := &CommitBatch{Epoch: 3, Time: 1700000000000000000}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("01HZZZZZZZZZZZZZZZZZZ%05d", i)
		switch i % 3 {
		case 0:
			b.Mutations = append(b.Mutations, Mutation{Insert: &Task{ID: id, Pool: "default", Kind: "email.send", Key: "key-" + id, Payload: make([]byte, 100), Status: StatusQueued, SubmittedAt: 1700000000000000000, MaxAttempts: 5, Backoff: Backoff{Initial: 1e9, Max: 300e9, Jitter: 0.2}, Tags: []KV{{K: "traceparent", V: "00-abc-def-01"}}}})
		case 1:
			b.Mutations = append(b.Mutations, Mutation{Start: &Start{ID: id, Attempt: 1, Lease: 3<<32 | uint64(i), Worker: "worker-1", At: 1700000000000000000}})
		case 2:
			b.Mutations = append(b.Mutations, Mutation{Finish: &Finish{ID: id, Lease: 3<<32 | uint64(i), Status: StatusSucceeded, Output: make([]byte, 50), At: 1700000000000000000}})
		}
	}
	return b
}

func BenchmarkReflectEncode(b *testing.B) {
	bt := mkBatch()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_, _ = msgpack.Marshal(bt)
	}
}

func BenchmarkReflectDecode(b *testing.B) {
	data, _ := msgpack.Marshal(mkBatch())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var out CommitBatch
		if err := msgpack.Unmarshal(data, &out); err != nil {
			b.Fatal(err)
		}
	}
}
