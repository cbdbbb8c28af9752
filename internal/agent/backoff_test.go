package agent

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	// With the largest draw, the waits show the ceilings: doubling from
	// 500 ms, capped at 30 s.
	b := newBackoff()
	b.rand = func(n int64) int64 { return n - 1 }
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := b.next(); got != w-1 {
			t.Errorf("attempt %d: %v, want %v", i, got, w-1)
		}
	}
	for range 100 { // far past the shift's range: no overflow
		if got := b.next(); got != backoffCap-1 {
			t.Fatalf("late attempt: %v", got)
		}
	}

	// A short session does not reset; a long one does.
	b.sessionEnded(time.Second)
	if got := b.next(); got != backoffCap-1 {
		t.Errorf("after a short session: %v", got)
	}
	b.sessionEnded(2 * time.Minute)
	if got := b.next(); got != backoffBase-1 {
		t.Errorf("after a long session: %v, want the base", got)
	}
}

// Full jitter: waits spread over [0, ceiling), not bunched at the top.
func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	b := newBackoff()
	b.attempt = 10 // ceiling = cap
	var low, high int
	for range 1000 {
		d := b.next()
		b.attempt = 10
		if d < 0 || d >= backoffCap {
			t.Fatalf("wait %v out of [0, %v)", d, backoffCap)
		}
		if d < backoffCap/4 {
			low++
		}
		if d > backoffCap*3/4 {
			high++
		}
	}
	if low < 150 || high < 150 {
		t.Errorf("waits not spread: %d in the lowest quarter, %d in the highest", low, high)
	}
}
