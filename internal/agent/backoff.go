package agent

import (
	"math/rand/v2"
	"time"
)

// Reconnection backoff: capped exponential with full jitter (each wait is
// uniform in [0, min(cap, base·2^attempt))). Full jitter matters at fleet
// scale: after a gateway restart ten thousand nodes must not come back in
// lockstep, and spreading them over the whole window beats any fixed
// increment. A session that lived longer than backoffResetAfter resets the
// attempt count, so one blip after a long healthy session retries fast.
const (
	backoffBase       = 500 * time.Millisecond
	backoffCap        = 30 * time.Second
	backoffResetAfter = time.Minute
)

// backoff computes the wait before the next connection attempt. It is
// used by one goroutine (the node's run loop) and needs no lock.
type backoff struct {
	base, cap time.Duration
	attempt   int
	rand      func(n int64) int64 // rand.Int64N; tests fix it
}

// newBackoff returns the node's reconnection backoff.
func newBackoff() *backoff {
	return &backoff{base: backoffBase, cap: backoffCap, rand: rand.Int64N}
}

// next returns the wait before the next attempt and counts the attempt.
func (b *backoff) next() time.Duration {
	ceiling := b.cap
	// Stop doubling once past the cap, so the shift never overflows.
	if b.attempt < 32 {
		if d := b.base << b.attempt; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	b.attempt++
	return time.Duration(b.rand(int64(ceiling)))
}

// sessionEnded resets the attempt count when the session that just ended
// had been healthy for long enough.
func (b *backoff) sessionEnded(lasted time.Duration) {
	if lasted > backoffResetAfter {
		b.attempt = 0
	}
}
