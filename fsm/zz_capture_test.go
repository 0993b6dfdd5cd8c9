package fsm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
)

func TestZZCaptureFormat(t *testing.T) {
	h := sha256.New()
	r := &prng{s: 11}
	n := 0
	for round := 0; round < 300; round++ {
		all := round%10 == 0
		b := &CommitBatch{Epoch: randUint(r), Time: randInt(r)}
		for i := 0; i < 1+r.intn(2*numMutationKinds); i++ {
			b.Mutations = append(b.Mutations, randMutation(r, r.intn(numMutationKinds), all))
		}
		data, err := EncodeCommitBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		n += len(data)
		h.Write(data)
		var task Task
		fillValue(r, reflect.ValueOf(&task).Elem(), all)
		var sc Schedule
		fillValue(r, reflect.ValueOf(&sc).Elem(), all)
		var tb Tombstone
		fillValue(r, reflect.ValueOf(&tb).Elem(), all)
		for _, rec := range [][]byte{appendTask(nil, &task), appendSchedule(nil, &sc), appendTombstone(nil, &tb)} {
			n += len(rec)
			h.Write(rec)
		}
		eb, _ := EncodeEpochBump(&EpochBump{Epoch: randUint(r), Leader: randString(r), Time: randInt(r)})
		n += len(eb)
		h.Write(eb)
	}
	fmt.Printf("CORPUS %d %s\n", n, hex.EncodeToString(h.Sum(nil)))
	small, _ := EncodeCommitBatch(&CommitBatch{Epoch: 3, Time: baseTime, Mutations: []Mutation{
		insert("t1", "p", "k1"), start("t1", 1, lease(3, 1)), finish("t1", lease(3, 1), StatusSucceeded),
	}})
	fmt.Printf("SMALL %s\n", hex.EncodeToString(small))
	eb, _ := EncodeEpochBump(&EpochBump{Epoch: 7, Leader: "node-a", Time: baseTime})
	fmt.Printf("BUMP %s\n", hex.EncodeToString(eb))
	rich := richState(t)
	fmt.Printf("RICH %x\n", rich.Hash())
}
