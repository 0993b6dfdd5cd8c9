package cron

import (
	"math"
	"time"

	"github.com/cronoq/cronoq/fsm"
)

// DefaultCatchUpLimit is the number of missed slots CatchUpAll fires when the
// schedule's limit is 0.
const DefaultCatchUpLimit = 100

// MaxCatchUpLimit caps the number of slots one plan fires under CatchUpAll,
// whatever the schedule asks for.
const MaxCatchUpLimit = 1000

// Decision is one step of a plan: advance the schedule's cursor to Slot.
type Decision struct {
	Slot    time.Time // the slot, in UTC
	Skipped uint32    // slots passed over between the previous decision (or the cursor) and Slot
	Fire    bool      // true: Slot fires a task; false: Slot itself is recorded as skipped
}

// Plan decides what a schedule does about its due slots: those s with
// cursor < s <= now, where cursor is the schedule's committed last fire (or
// its creation instant if it never fired). It is a pure function of its
// arguments, and decisions are in slot order, so committing them in order
// moves the cursor to the last decision's slot, with every slot between the
// old cursor and it either fired or counted in a Skipped.
//
//   - No due slot: nil.
//   - One due slot: it fires, whatever the policy.
//   - n > 1 due slots (fires missed while nobody could fire them):
//     CatchUpOnce (and any unknown policy value) fires the latest one, with
//     Skipped = n-1; CatchUpSkip records the latest one as skipped, with
//     Skipped = n-1; CatchUpAll fires the latest k = min(n, limit) slots in
//     order, the first of them carrying Skipped = n-k. A limit of 0 means
//     DefaultCatchUpLimit; limits above MaxCatchUpLimit are lowered to it.
//
// Slots are counted arithmetically (per day, never per slot) and exactly,
// up to a span of about 2,870 years between cursor and now; Skipped saturates
// at math.MaxUint32, which only a span of over 136 years of per-second slots
// reaches. A cursor that far in the past is the only case where the count is
// not exact.
func Plan(e *Expr, cursor, now time.Time, policy fsm.CatchUp, limit uint32) []Decision {
	if e == nil || !now.After(cursor) {
		return nil
	}
	lo, hi := cursor.Unix()+1, now.Unix()
	n, exact := e.count(lo, hi)
	if !exact {
		n = math.MaxUint64
	}
	if n == 0 {
		return nil
	}
	last, ok := e.prev(hi, lo)
	if !ok {
		return nil // unreachable: count found a slot in the same range
	}
	if n == 1 {
		return []Decision{{Slot: utc(last), Fire: true}}
	}
	switch policy {
	case fsm.CatchUpSkip:
		return []Decision{{Slot: utc(last), Skipped: sat32(n - 1), Fire: false}}
	case fsm.CatchUpAll:
		k := uint64(limit)
		if k == 0 {
			k = DefaultCatchUpLimit
		}
		if k > MaxCatchUpLimit {
			k = MaxCatchUpLimit
		}
		if k > n {
			k = n
		}
		slots := make([]int64, k)
		slots[k-1] = last
		for i := int(k) - 2; i >= 0; i-- {
			s, ok := e.prev(slots[i+1]-1, lo)
			if !ok {
				// Unreachable (count saw k slots); keep the plan consistent
				// anyway: fire what was found, count the rest as skipped.
				slots = slots[i+1:]
				break
			}
			slots[i] = s
		}
		out := make([]Decision, len(slots))
		for i, s := range slots {
			out[i] = Decision{Slot: utc(s), Fire: true}
		}
		out[0].Skipped = sat32(n - uint64(len(slots)))
		return out
	default: // fsm.CatchUpOnce and unknown values
		return []Decision{{Slot: utc(last), Skipped: sat32(n - 1), Fire: true}}
	}
}

func utc(u int64) time.Time { return time.Unix(u, 0).UTC() }

func sat32(n uint64) uint32 {
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}
