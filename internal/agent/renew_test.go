package agent

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestRenewTiming(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cert := &x509.Certificate{NotBefore: start, NotAfter: start.Add(24 * time.Hour)}
	if got, want := renewAt(cert), start.Add(time.Duration(0.6*float64(24*time.Hour))); !got.Equal(want) {
		t.Errorf("renewAt = %v, want %v", got, want)
	}
	for remaining, want := range map[time.Duration]time.Duration{
		time.Second:     10 * time.Second,
		5 * time.Minute: 30 * time.Second,
		10 * time.Hour:  5 * time.Minute,
	} {
		if got := renewRetry(remaining); got != want {
			t.Errorf("renewRetry(%v) = %v, want %v", remaining, got, want)
		}
	}
}
