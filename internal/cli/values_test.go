package cli

import (
	"slices"
	"testing"
	"time"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90d", 90 * 24 * time.Hour, true},
		{"12h", 12 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"1h30m", 90 * time.Minute, true},
		{"0", 0, true},
		{"d", 0, false},
		{"1.5d", 0, false},
		{"-1d", 0, false},
		{"-5m", 0, false},
		{"1d-5m", 0, false},
		{"5", 0, false},
		{"soon", 0, false},
		{"65535d2000000h", 0, false}, // past time.Duration: it used to wrap negative
		{"65535d", 65535 * 24 * time.Hour, true},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2025-01-02T03:04:05Z", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), true},
		{"2025-01-02T03:04:05+02:00", time.Date(2025, 1, 2, 1, 4, 5, 0, time.UTC), true},
		{"1h", now.Add(-time.Hour), true},
		{"7d", now.AddDate(0, 0, -7), true},
		{"2025-01-02", time.Time{}, false},
		{"yesterday", time.Time{}, false},
	}
	for _, tt := range tests {
		got, err := parseTime(tt.in, now)
		if (err == nil) != tt.ok || !got.Equal(tt.want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestProblemLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    *apiv1.PolicyProblem
		want string
	}{
		{&apiv1.PolicyProblem{Line: 2, Column: 17, Message: "unexpected token"}, "a.cedar:2:17: unexpected token"},
		{&apiv1.PolicyProblem{Line: 3, Message: "unknown entity type"}, "a.cedar:3: unknown entity type"},
		{&apiv1.PolicyProblem{Message: "empty document\nadd a statement"}, "a.cedar: empty document add a statement"},
	}
	for _, tt := range tests {
		if got := problemLine("a.cedar", tt.p); got != tt.want {
			t.Errorf("problemLine(%v) = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"abc123":       "abc123",
		"eyJpZCI6NX0=": "eyJpZCI6NX0=",
		"a b":          "'a b'",
		"it's":         `'it'\''s'`,
		"":             "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestAPIActions checks that completion knows the actions the proto files
// declare.
func TestAPIActions(t *testing.T) {
	t.Parallel()
	actions := apiActions()
	for _, a := range []string{"compute:tenants:create", "compute:users:list", "compute:audit:list"} {
		if !slices.Contains(actions, a) {
			t.Errorf("apiActions() lacks %s: %v", a, actions)
		}
	}
}

// FuzzParseDuration: whatever the input, a duration parsed without error is
// never negative and prints as what it read.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"90d", "1d12h", "0", "65535d2000000h", "1d-5m", "2562047h", "106751d23h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("parseDuration(%q) = %v, negative", s, d)
		}
		if back, err := parseDuration(d.String()); err != nil || back != d {
			t.Fatalf("parseDuration(%q) = %v, which reads back as %v, %v", s, d, back, err)
		}
	})
}
