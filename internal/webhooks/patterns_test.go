package webhooks

import (
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/store"
)

// FuzzCheckPatterns: what a user gives as --events either is refused in one
// line or comes back as valid patterns without repeats, which CheckPatterns
// accepts again unchanged, and which deliver every event "*" would only if
// they include "*".
func FuzzCheckPatterns(f *testing.F) {
	for _, s := range []string{"*", "reservation.*", "node.ready,node.revoked", "node.ready, node.ready", "nope.*", "node.", ".x", "node.Ready", "node.a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := CheckPatterns(strings.Split(s, ","))
		if err != nil {
			if msg := err.Error(); msg == "" || strings.Contains(msg, "\n") {
				t.Fatalf("CheckPatterns(%q) refused with %q: want one line", s, msg)
			}
			return
		}
		if len(out) == 0 {
			t.Fatalf("CheckPatterns(%q) accepted no patterns", s)
		}
		for i, p := range out {
			if !validPattern(p) || slices.Contains(out[:i], p) {
				t.Fatalf("CheckPatterns(%q) = %q: %q is invalid or repeated", s, out, p)
			}
		}
		again, err := CheckPatterns(out)
		if err != nil || !slices.Equal(again, out) {
			t.Fatalf("CheckPatterns(%q) = %q, which checks again as %q, %v", s, out, again, err)
		}
		for _, kind := range store.EventKinds {
			typ := kind + ".x"
			if Matches(out, typ) && !slices.Contains(out, "*") && !slices.Contains(out, kind+".*") && !slices.Contains(out, typ) {
				t.Fatalf("patterns %q match %s without naming it", out, typ)
			}
		}
	})
}
