package checker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// delHist builds delivery histories: subscriptions on the queue pool,
// tasks submitted, reads, discards and acks of consumer c13, then the
// drain, the catch-up and the final read.
type delHist struct {
	h     *hb
	final []history.TaskState
}

const (
	subT = "jd-terminal"
	subE = "jd-every"
)

func newDelHist() *delHist {
	d := &delHist{h: &hb{}}
	for _, s := range workload.DeliverySubs {
		v := &history.Value{Subscription: s.Name, Pool: s.Pools[0], Statuses: s.Statuses}
		d.h.call("c13", workload.SubCreate, v, history.OK, v)
	}
	return d
}

func ev(c uint64, id, st string) history.EventState {
	return history.EventState{Cursor: c, ID: id, Pool: q, Status: st, Attempt: 1}
}

// task submits id (acknowledged) and notes its final status.
func (d *delHist) task(id, status string) {
	d.h.submit("c1", "k-"+id, id)
	d.final = append(d.final, history.TaskState{ID: id, Pool: q, Key: "k-" + id, Status: status, Attempt: 1, MaxAttempts: 4})
}

func (d *delHist) read(sub string, session int, evs ...history.EventState) {
	d.h.add("c13", history.OK, workload.SubRead, &history.Value{Subscription: sub, Session: session, Events: evs})
}

func (d *delHist) drop(sub string, session int, evs ...history.EventState) {
	d.h.add("c13", history.OK, workload.SubDrop, &history.Value{Subscription: sub, Session: session, Events: evs})
}

func (d *delHist) ack(sub string, typ history.Type, evs ...history.EventState) {
	v := &history.Value{Subscription: sub, Cursor: evs[len(evs)-1].Cursor, Events: evs}
	d.h.call("c13/ack", workload.SubAck, v, typ, v)
}

// end records the drain, the catch-up of each subscription and the final
// read.
func (d *delHist) end(drained bool, caughtUp ...string) *Result {
	typ := history.Info
	if drained {
		typ = history.OK
	}
	d.h.call("final", workload.DrainOp, &history.Value{Detail: "[q cron wf lanes]"}, typ, nil)
	for _, s := range caughtUp {
		d.h.call("c13", workload.SubFinal, &history.Value{Subscription: s}, history.OK, &history.Value{Subscription: s})
	}
	d.h.final(d.final...)
	return Delivery(d.h.ops, Params{})
}

// happy is a valid run: three tasks, both subscriptions delivered, with a
// redelivery after a discarded read and an ack of unknown outcome retried.
func happy() *delHist {
	d := newDelHist()
	d.task("t1", "succeeded")
	d.task("t2", "failed")
	d.task("t3", "cancelled")
	d.read(subT, 1, ev(10, "t1", "succeeded"))
	d.ack(subT, history.OK, ev(10, "t1", "succeeded"))
	d.read(subT, 1, ev(20, "t2", "failed"), ev(30, "t3", "cancelled"))
	d.drop(subT, 1, ev(20, "t2", "failed"), ev(30, "t3", "cancelled"))
	d.read(subT, 2, ev(20, "t2", "failed"), ev(30, "t3", "cancelled"))
	d.ack(subT, history.Info, ev(20, "t2", "failed"), ev(30, "t3", "cancelled"))
	d.ack(subT, history.OK, ev(20, "t2", "failed"), ev(30, "t3", "cancelled"))

	d.read(subE, 1, ev(5, "t1", "queued"), ev(7, "t1", "running"), ev(10, "t1", "succeeded"))
	d.read(subE, 1, ev(15, "t2", "running"), ev(20, "t2", "failed"), ev(7, "t1", "running")) // a resend
	d.ack(subE, history.OK, ev(5, "t1", "queued"), ev(7, "t1", "running"), ev(10, "t1", "succeeded"),
		ev(15, "t2", "running"), ev(20, "t2", "failed"))
	d.read(subE, 2, ev(30, "t3", "cancelled"))
	d.ack(subE, history.OK, ev(30, "t3", "cancelled"))
	return d
}

func TestDeliveryValid(t *testing.T) {
	r := happy().end(true, subT, subE)
	require.Equal(t, Valid, r.Valid, "%+v", r.Anomalies)
	require.Equal(t, int64(3), r.Counts[subT+".expected_terminal"])
	require.Equal(t, int64(3), r.Counts[subE+".expected_terminal"])
	require.Equal(t, int64(1), r.Counts[subT+".discarded_reads"])
	require.Equal(t, int64(2), r.Counts[subT+".redelivered"])
	require.Equal(t, int64(1), r.Counts[subT+".acks_unknown"])
	require.Equal(t, int64(2), r.Counts[subT+".streams"])
}

func TestDeliveryWithoutWorkload(t *testing.T) {
	h := &hb{}
	h.submit("c1", "k", "t1")
	r := Delivery(h.ops, Params{})
	require.Equal(t, Valid, r.Valid)
	require.Contains(t, r.Notes, "no delivery workload in this run")
}

// TestDeliveryLostAfterDiscard is what a server that acknowledges on send
// produces: a discarded read's events never come again, and the stream
// resumes after them.
func TestDeliveryLostAfterDiscard(t *testing.T) {
	d := newDelHist()
	d.task("t1", "succeeded")
	d.task("t2", "failed")
	d.task("t3", "succeeded")
	d.read(subT, 1, ev(10, "t1", "succeeded"), ev(20, "t2", "failed"))
	d.drop(subT, 1, ev(10, "t1", "succeeded"), ev(20, "t2", "failed"))
	d.read(subT, 2, ev(30, "t3", "succeeded"))
	d.ack(subT, history.OK, ev(30, "t3", "succeeded"))
	r := d.end(true, subT)
	require.Equal(t, Invalid, r.Valid)
	require.Equal(t, int64(2), r.AnomalyCount["D1"])
	require.Contains(t, r.Anomalies[0].Detail, "only in reads the consumer discarded")
	require.Equal(t, int64(2), r.Counts[subT+".missing_terminal"])
}

func TestDeliveryNeverDelivered(t *testing.T) {
	d := newDelHist()
	d.task("t1", "succeeded")
	d.task("t2", "cancelled")
	d.read(subT, 1, ev(10, "t1", "succeeded"))
	d.ack(subT, history.OK, ev(10, "t1", "succeeded"))
	r := d.end(true, subT)
	require.Equal(t, Invalid, r.Valid)
	require.True(t, hasInvariant(r, "D1"))
	require.Contains(t, r.Anomalies[0].Detail, "t2 (cancelled) lost: never delivered")
}

func TestDeliveryAckNeverConfirmed(t *testing.T) {
	d := newDelHist()
	d.task("t1", "succeeded")
	d.read(subT, 1, ev(10, "t1", "succeeded"))
	d.ack(subT, history.Info, ev(10, "t1", "succeeded"))
	d.ack(subT, history.Fail, ev(10, "t1", "succeeded"))
	r := d.end(true, subT)
	require.Equal(t, Invalid, r.Valid)
	require.Contains(t, r.Anomalies[0].Detail, "no ack covering it was answered ok")
}

// TestDeliveryMissingWithoutCatchUpIsUnknown: without a catch-up (or a
// complete drain) a missing event may only be late.
func TestDeliveryMissingWithoutCatchUpIsUnknown(t *testing.T) {
	for _, drained := range []bool{true, false} {
		d := newDelHist()
		d.task("t1", "succeeded")
		var caught []string
		if !drained {
			caught = []string{subT, subE}
		}
		r := d.end(drained, caught...)
		require.Equal(t, Unknown, r.Valid, "drained %v", drained)
		require.Empty(t, r.Anomalies)
	}
}

func TestDeliveryOrder(t *testing.T) {
	d := newDelHist()
	d.task("t1", "succeeded")
	d.task("t2", "succeeded")
	d.read(subT, 1, ev(20, "t2", "succeeded"))
	d.read(subT, 1, ev(10, "t1", "succeeded")) // new, but below 20 on the same stream
	d.ack(subT, history.OK, ev(20, "t2", "succeeded"))
	d.read(subT, 2, ev(10, "t1", "succeeded")) // a new stream may start lower
	d.ack(subT, history.OK, ev(10, "t1", "succeeded"))
	r := d.end(true, subT)
	require.Equal(t, Invalid, r.Valid)
	require.Equal(t, int64(1), r.AnomalyCount["D2"])
	require.Len(t, r.AnomalyCount, 1)
}

func TestDeliveryCursorIdentity(t *testing.T) {
	d := newDelHist()
	d.task("t1", "succeeded")
	d.task("t2", "succeeded")
	d.read(subT, 1, ev(10, "t1", "succeeded"), ev(20, "t2", "succeeded"))
	d.read(subT, 2, ev(10, "t2", "succeeded")) // same cursor, another task
	d.read(subE, 1, ev(11, "t1", "succeeded")) // t1's end elsewhere at another cursor
	r := d.end(false)
	require.Equal(t, Invalid, r.Valid)
	require.Equal(t, int64(2), r.AnomalyCount["D3"])
}

func TestDeliveryFilterAndExistence(t *testing.T) {
	d := newDelHist()
	d.task("t1", "succeeded")
	d.read(subT, 1, ev(5, "t1", "running"))                                                // not a terminal status
	d.read(subE, 1, history.EventState{Cursor: 6, ID: "t9", Pool: "wf", Status: "queued"}) // another pool, unknown task
	d.read(subE, 1, ev(10, "t1", "failed"))                                                // it succeeded
	r := d.end(false)
	require.Equal(t, Invalid, r.Valid)
	require.Equal(t, int64(4), r.AnomalyCount["D4"], "%+v", r.Anomalies)
}

func TestDeliveryEventAfterTerminal(t *testing.T) {
	d := newDelHist()
	d.task("t1", "succeeded")
	d.read(subE, 1, ev(10, "t1", "succeeded"), ev(12, "t1", "running"))
	d.ack(subE, history.OK, ev(10, "t1", "succeeded"), ev(12, "t1", "running"))
	d.read(subT, 1, ev(10, "t1", "succeeded"))
	d.ack(subT, history.OK, ev(10, "t1", "succeeded"))
	r := d.end(true, subT, subE)
	require.Equal(t, Invalid, r.Valid)
	require.Equal(t, int64(1), r.AnomalyCount["D5"])
	require.Len(t, r.AnomalyCount, 1)
}

func TestDeliveryNoAckDuringFaultsIsUnknown(t *testing.T) {
	d := happy()
	d.h.call("final", workload.DrainOp, &history.Value{Detail: "[q]"}, history.OK, nil)
	d.h.call("c13", workload.SubFinal, &history.Value{Subscription: subT}, history.OK, nil)
	d.h.call("c13", workload.SubFinal, &history.Value{Subscription: subE}, history.OK, nil)
	d.h.final(d.final...)
	end := d.h.t
	r := Delivery(d.h.ops, Params{FaultStart: end + 1, FaultEnd: end + 100})
	require.Equal(t, Unknown, r.Valid)
	r = Delivery(d.h.ops, Params{FaultStart: 0, FaultEnd: end})
	require.Equal(t, Valid, r.Valid)
}
