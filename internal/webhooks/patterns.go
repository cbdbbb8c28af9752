package webhooks

import (
	"fmt"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/internal/store"
)

// TestEventType is the type of the event TestWebhook sends.
const TestEventType = "webhook.test"

// maxPatterns bounds how many patterns one webhook has.
const maxPatterns = 32

// CheckPatterns refuses event patterns a webhook cannot have, in one line
// that says which and what is allowed: "*" (every event), a kind and ".*"
// (reservation.*), or a type (node.ready), of the kinds the outbox writes.
// It returns them without repeats, in the order given.
func CheckPatterns(patterns []string) ([]string, error) {
	if len(patterns) == 0 {
		return nil, fmt.Errorf("name the events to deliver, such as --events 'reservation.*' or --events '*'")
	}
	if len(patterns) > maxPatterns {
		return nil, fmt.Errorf("%d event patterns is too many: at most %d", len(patterns), maxPatterns)
	}
	var out []string
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if !validPattern(p) {
			return nil, fmt.Errorf("event pattern %q is not one of *, KIND.* or KIND.NAME with KIND one of %s", p, strings.Join(store.EventKinds, ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// validPattern: *, or kind.* or kind.name with a known kind and a name of
// lower-case letters, digits, _ and -.
func validPattern(p string) bool {
	if p == "*" {
		return true
	}
	kind, name, ok := strings.Cut(p, ".")
	if !ok || !slices.Contains(store.EventKinds, kind) {
		return false
	}
	if name == "*" {
		return true
	}
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// Matches reports whether an event of type typ is delivered to a webhook
// with these patterns.
func Matches(patterns []string, typ string) bool {
	kind, _, _ := strings.Cut(typ, ".")
	for _, p := range patterns {
		if p == "*" || p == typ || p == kind+".*" {
			return true
		}
	}
	return false
}
