package store

import (
	"context"
	"fmt"
)

// bookingViolationsSQL finds what would break the booking invariant, on
// either engine: a booking of a reservation that is not placed or bound, an
// active reservation without exactly one booking per GPU, and a GPU that
// two active reservations hold.
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
GROUP BY d.device_uuid HAVING COUNT(*) > 1`

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
