package core

import (
	"time"

	"github.com/cronoq/cronoq/fsm"
)

// splitmix64 is a small deterministic PRNG (Steele, Lea, Flood 2014). The
// core draws backoff jitter from it so that the same seed and the same calls
// produce the same delays.
type splitmix64 struct{ s uint64 }

func (r *splitmix64) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// float64 returns a uniform value in [0, 1).
func (r *splitmix64) float64() float64 {
	return float64(r.next()>>11) / (1 << 53)
}

// backoffDelay is the delay before the retry that follows failed attempt
// number attempt (1-based): Initial doubled per earlier attempt, capped at
// Max, then spread by ±Jitter. The result is at least one nanosecond.
func backoffDelay(b fsm.Backoff, attempt uint32, r *splitmix64) time.Duration {
	d := b.Initial
	for i := uint32(1); i < attempt && d < b.Max; i++ {
		if d > b.Max/2 {
			d = b.Max
			break
		}
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	if b.Jitter > 0 {
		u := r.float64()
		d = time.Duration(float64(d) * (1 + b.Jitter*(2*u-1)))
	}
	if d < 1 {
		d = 1
	}
	return d
}
