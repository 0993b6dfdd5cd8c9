package engine

import "github.com/cronoq/cronoq/fsm"

// Encoded sizes are estimated from above so that an entry cut by the
// estimate fits under MaxBatchBytes; the real size is checked after encoding
// and the cut made smaller when the estimate was short.
const (
	batchOverhead = 64 // entry type byte, map and array headers, epoch, time
	fieldCost     = 16 // a field's key, its value's header and a fixed-size value
)

func mutationsSize(ms []fsm.Mutation) int {
	n := 0
	for i := range ms {
		n += mutationSize(&ms[i])
	}
	return n
}

func mutationSize(m *fsm.Mutation) int {
	n := fieldCost // the mutation's own map header and key
	switch {
	case m.Insert != nil:
		n += taskSize(m.Insert)
	case m.PutSchedule != nil:
		n += scheduleSize(m.PutSchedule)
	case m.Start != nil:
		n += 5*fieldCost + len(m.Start.ID) + len(m.Start.Worker)
	case m.Retry != nil:
		n += 5*fieldCost + len(m.Retry.ID) + len(m.Retry.Error)
	case m.Finish != nil:
		n += 6*fieldCost + len(m.Finish.ID) + len(m.Finish.Output) + len(m.Finish.Error)
	case m.Ready != nil:
		n += 2*fieldCost + len(m.Ready.ID)
	case m.Purge != nil:
		n += fieldCost + len(m.Purge.ID)
	case m.DelSchedule != nil:
		n += fieldCost + len(m.DelSchedule.Name)
	case m.PauseSchedule != nil:
		n += 3*fieldCost + len(m.PauseSchedule.Name)
	case m.Fire != nil:
		n += 4*fieldCost + len(m.Fire.Name) + len(m.Fire.TaskID)
	case m.Tombstone != nil:
		n += 3*fieldCost + len(m.Tombstone.NodeID)
	default:
		n += 16 * fieldCost
	}
	return n
}

func taskSize(t *fsm.Task) int {
	return 32*fieldCost + len(t.ID) + len(t.Pool) + len(t.Kind) + len(t.Key) +
		len(t.Payload) + kvSize(t.Labels) + kvSize(t.Tags) + len(t.Schedule) +
		len(t.Worker) + len(t.Output) + len(t.Error)
}

func scheduleSize(s *fsm.Schedule) int {
	return 24*fieldCost + len(s.Name) + len(s.Cron) + len(s.TZ) + len(s.Pool) +
		len(s.Kind) + len(s.Payload) + kvSize(s.Labels) + kvSize(s.Tags) + len(s.LastTask)
}

func kvSize(kvs []fsm.KV) int {
	n := 0
	for _, kv := range kvs {
		n += 2*fieldCost + len(kv.K) + len(kv.V)
	}
	return n
}
