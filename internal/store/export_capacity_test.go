package store

import (
	"context"
	"fmt"
	"strings"
)

// bookingViolationsSQL finds what would break the booking invariant, on
// either engine: a booking of a reservation that is not placed or bound, an
// active reservation without exactly one booking per GPU, and a GPU that
// two active reservations hold; and a node's free count (node_free, which
// placement reads) that disagrees with its GPUs and their bookings, or a
// stale copy of its pool or eligibility.
const bookingViolationsSQL = `
SELECT 'booking of ' || b.reservation_id || ' (' || COALESCE(r.state, 'missing') || ') holds ' || b.device_uuid
FROM device_bookings b LEFT JOIN reservations r ON r.id = b.reservation_id
WHERE r.state IS NULL OR r.state NOT IN ('placed', 'bound')
UNION ALL
SELECT 'active reservation ' || r.id || ' has a wrong number of bookings'
FROM reservations r
WHERE r.state IN ('placed', 'bound')
  AND (SELECT COUNT(*) FROM device_bookings b WHERE b.reservation_id = r.id) <> r.gpus
UNION ALL
SELECT 'GPU ' || d.device_uuid || ' is held by more than one active reservation'
FROM reservation_devices d JOIN reservations r ON r.id = d.reservation_id
WHERE r.state IN ('placed', 'bound')
GROUP BY d.device_uuid HAVING COUNT(*) > 1
UNION ALL
SELECT 'node ' || f.node_id || ' counts ' || f.free || ' free GPUs of model "' || f.model_key || '", has ' ||
       (SELECT COUNT(*) FROM devices d WHERE d.node_id = f.node_id AND (d.model_key = f.model_key OR f.model_key = '')
          AND NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = d.uuid))
FROM node_free f
WHERE f.free <> (SELECT COUNT(*) FROM devices d WHERE d.node_id = f.node_id AND (d.model_key = f.model_key OR f.model_key = '')
                   AND NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = d.uuid))
UNION ALL
SELECT 'node ' || d.node_id || ' has GPUs of model "' || d.model_key || '" but no free count'
FROM devices d
WHERE NOT EXISTS (SELECT 1 FROM node_free f WHERE f.node_id = d.node_id AND f.model_key = d.model_key)
   OR NOT EXISTS (SELECT 1 FROM node_free f WHERE f.node_id = d.node_id AND f.model_key = '')
UNION ALL
SELECT 'node ' || f.node_id || ' has a stale pool or eligibility in its free count'
FROM node_free f JOIN nodes n ON n.id = f.node_id
WHERE f.pool <> n.pool OR f.tenant <> n.tenant OR f.eligible <> (n.state = 'ready' AND n.cordoned = false AND n.pool <> '')`

// BookingViolations lets the external tests check the booking invariant
// with a query of the tables themselves, which no Querier method exposes.
func BookingViolations(ctx context.Context, s *Store) ([]string, error) {
	var out []string
	switch e := s.eng.(type) {
	case *sqliteEngine:
		rows, err := e.db.QueryContext(ctx, bookingViolationsSQL)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, rows.Err()
	case *pgEngine:
		rows, err := e.pool.Query(ctx, bookingViolationsSQL)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, rows.Err()
	}
	return nil, fmt.Errorf("unknown engine %T", s.eng)
}

// RecountNodeFree rebuilds node_free with migration 0008's own backfill,
// so that the external tests can check that the backfill and the triggers
// agree on a store with history.
func RecountNodeFree(ctx context.Context, s *Store) error {
	migs := sqliteMigrations
	if _, ok := s.eng.(*pgEngine); ok {
		migs = postgresMigrations
	}
	var script string
	for _, m := range migs {
		if m.Name == "node_free" {
			script = m.SQL
		}
	}
	start := strings.Index(script, "INSERT INTO node_free")
	end := strings.Index(script[start:], ";\n")
	if start < 0 || end < 0 {
		return fmt.Errorf("no backfill in migration node_free")
	}
	sql := "DELETE FROM node_free; " + script[start:start+end+1]
	switch e := s.eng.(type) {
	case *sqliteEngine:
		_, err := e.db.ExecContext(ctx, sql)
		return err
	case *pgEngine:
		_, err := e.pool.Exec(ctx, sql)
		return err
	}
	return fmt.Errorf("unknown engine %T", s.eng)
}

// SharedQueued is how many InSharedTx calls wait for the next shared
// transaction: tests use it to build a batch in a known order.
func (s *Store) SharedQueued() int {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	return len(s.shared.queue)
}
