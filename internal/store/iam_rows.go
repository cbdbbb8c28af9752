package store

import (
	"errors"
	"fmt"
	"math"
)

// Helpers both engines' identity code (sqlite_iam.go, postgres_iam.go)
// share: the parts of a call that do not depend on the engine.

// errBadLimit is returned for an AuditFilter without a positive Limit: an
// unbounded read of the audit log is always a caller's mistake.
var errBadLimit = errors.New("limit must be > 0")

// convertRows converts each of an engine's rows to its domain type.
func convertRows[R, T any](rows []R, convert func(R) T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = convert(r)
	}
	return out
}

// auditBeforeID is the exclusive upper bound on IDs for f: its BeforeID, or
// the largest ID on the first page. A bound is always passed, rather than
// NULL for none, so that the query's id range stays one the planner seeks on.
func auditBeforeID(f AuditFilter) int64 {
	if f.BeforeID != 0 {
		return f.BeforeID
	}
	return math.MaxInt64
}

// checkAuditFilter refuses a filter the store cannot run.
func checkAuditFilter(f AuditFilter) error {
	if f.Limit <= 0 {
		return fmt.Errorf("store: list audit events: %w (got %d)", errBadLimit, f.Limit)
	}
	return nil
}

// key names a row keyed by tenant and name in errors: "acme/alice".
func key(tenant, name string) string { return tenant + "/" + name }
