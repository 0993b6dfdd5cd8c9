package bad

import (
	crand "crypto/rand"
	"math/rand"
	r2 "math/rand/v2"
	"time"
	clock "time"
)

func clocks() {
	_ = time.Now()
	_ = time.Since(time.Time{})
	_ = clock.Until(time.Time{})
	time.Sleep(0)
	_ = time.NewTimer(0)
	_ = rand.Int()
	_ = r2.Int()
	_, _ = crand.Read(nil)
	go func() {}()
}
