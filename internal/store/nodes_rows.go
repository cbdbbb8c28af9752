package store

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Helpers both engines' node code (sqlite_nodes.go, postgres_nodes.go)
// share: the parts of a call that do not depend on the engine.

// errBadResult is returned by FinishCommand for a state that is not a
// result. A node's result is succeeded or failed, or expired (it got the
// command after its deadline) or unknown (it crashed while running it).
var errBadResult = errors.New("a command's result is succeeded, failed, expired or unknown")

// encodeStrings is a labels or args map as the JSON object both engines
// store: {} for nil or empty.
func encodeStrings(m map[string]string) []byte {
	if len(m) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(m) // a map[string]string always marshals
	return b
}

// decodeStrings reads what encodeStrings stored: nil for an empty object, as
// the caller gave it.
func decodeStrings(b []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// nilIfEmpty is a byte column as the caller gave it: nil for empty, whatever
// the driver returned.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// jsonStrings is the JSON array of ids that SQLite's json_each reads.
func jsonStrings(ss []string) string {
	b, _ := json.Marshal(ss) // a []string always marshals
	return string(b)
}

// checkLimit refuses a non-positive limit: an unbounded read of a queue is
// always a caller's mistake.
func checkLimit(what string, limit int) error {
	if limit <= 0 {
		return fmt.Errorf("store: %s: %w (got %d)", what, errBadLimit, limit)
	}
	return nil
}

// checkResult refuses a FinishCommand state that is not a result.
func checkResult(id string, state CommandState) error {
	switch state {
	case CommandSucceeded, CommandFailed, CommandExpired, CommandUnknown:
	default:
		return fmt.Errorf("store: finish command %q: %w (got %q)", id, errBadResult, state)
	}
	return nil
}

// sortCommands orders the rows an UPDATE ... RETURNING gave, which come in
// no defined order, oldest first.
func sortCommands(cs []NodeCommand) {
	slices.SortFunc(cs, func(a, b NodeCommand) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
}

// convertRowsErr is convertRows for a conversion that can fail (a JSON
// column).
func convertRowsErr[R, T any](rows []R, convert func(R) (T, error)) ([]T, error) {
	out := make([]T, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = convert(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}
