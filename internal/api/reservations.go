package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/agent/devices"
	"github.com/better-compute/better-compute/internal/capacity/catalog"
	"github.com/better-compute/better-compute/internal/store"
)

// reservationService reserves GPUs from pools: the tenant's own, or another
// tenant's offered to it (the authorizer admits those for creation only).
// Every other method acts on a reservation of the call's tenant; another
// tenant's answers not_found, as a missing one does.
type reservationService struct {
	base
	sessions Sessions // may be nil
}

// notify tells the gateway that the nodes of r hold something new: a
// placement to bind, or a release to unbind.
func (s *reservationService) notify(r store.Reservation) {
	if s.sessions == nil {
		return
	}
	for _, n := range r.NodeIDs {
		s.sessions.Notify(n)
	}
}

var _ apiv1connect.ReservationServiceHandler = (*reservationService)(nil)

const (
	maxReservationGPUs = 1024
	minReservation     = time.Minute
	maxReservation     = 366 * 24 * time.Hour
	// placeAttempts bounds the retries of a placement whose booking
	// collided with a concurrent one.
	placeAttempts = 5
	// listReservationsLimit bounds ListReservations.
	listReservationsLimit = 1000
)

func (s *reservationService) CreateReservation(ctx context.Context, req *connect.Request[apiv1.CreateReservationRequest]) (*connect.Response[apiv1.CreateReservationResponse], error) {
	m := req.Msg
	call := callFrom(ctx)
	tenant := m.GetTenant()
	if tenant == "" {
		tenant = call.Caller.Tenant
	}
	poolTenant := call.tenant()
	if g := m.GetGpus(); g < 1 || g > maxReservationGPUs {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("gpus is %d: ask for 1 to %d", g, maxReservationGPUs))
	}
	if m.GetModel() != "" {
		if _, ok := catalog.ByKey(m.GetModel()); !ok {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("model %q is not a catalog key", m.GetModel()))
		}
	}
	if (m.GetDuration() == nil) == (m.GetUntil() == nil) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("duration or until is required: give exactly one"))
	}
	hash, err := requestHash(m)
	if err != nil {
		return nil, err
	}
	var r store.Reservation
	for attempt := 1; ; attempt++ {
		err = s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
			now, err := q.Now(ctx)
			if err != nil {
				return err
			}
			d := m.GetDuration().AsDuration()
			if m.GetUntil() != nil {
				d = m.GetUntil().AsTime().Sub(now)
			}
			if d < minReservation || d > maxReservation {
				field := "duration"
				if m.GetUntil() != nil {
					field = "until"
				}
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s makes the reservation last %s: it must last 1m to 366d", field, d.Round(time.Second)))
			}
			id := "r-" + strings.ToLower(rand.Text())
			call.AuditResource = resourceFor(typeReservation, tenant, id).String()
			r, err = q.PlaceReservation(ctx, store.Placement{
				ID: id, Tenant: tenant, Principal: call.Caller.String(),
				PoolTenant: poolTenant, Pool: m.GetPool(),
				GPUs: int(m.GetGpus()), ModelKey: m.GetModel(), SameNode: m.GetSameNode(),
				EndsAt: now.Add(d), IdempotencyKey: m.GetIdempotencyKey(), RequestHash: hash,
			})
			switch {
			case err == nil:
				call.AuditResource = resourceFor(typeReservation, tenant, r.ID).String()
				return nil
			case errors.Is(err, store.ErrExhausted):
				return connect.NewError(connect.CodeResourceExhausted, errors.New(exhaustedMessage(err, poolTenant, m.GetPool())))
			case errors.Is(err, store.ErrConflict) && strings.Contains(err.Error(), "idempotency key reused"):
				return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("idempotency key %q reused with a different request", m.GetIdempotencyKey()))
			}
			return notFoundAs(err, typePool, poolTenant, m.GetPool())
		})
		if err == nil || !errors.Is(err, store.ErrConflict) || attempt == placeAttempts {
			break
		}
	}
	if errors.Is(err, store.ErrConflict) {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("placement in pool %s/%s kept colliding with concurrent ones: try again", poolTenant, m.GetPool()))
	}
	if err != nil {
		return nil, err
	}
	s.notify(r)
	return connect.NewResponse(&apiv1.CreateReservationResponse{Reservation: reservationProto(r)}), nil
}

// requestHash is the SHA-256 of the request's deterministic encoding
// without its idempotency key: what tells a retry from a reuse of the key.
func requestHash(m *apiv1.CreateReservationRequest) ([]byte, error) {
	c := proto.CloneOf(m)
	c.IdempotencyKey = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("hash request: %w", err)
	}
	h := sha256.Sum256(b)
	return h[:], nil
}

// exhaustedMessage is the part of the store's ErrExhausted that says what
// is free.
func exhaustedMessage(err error, poolTenant, pool string) string {
	msg := err.Error()
	if i := strings.Index(msg, fmt.Sprintf("pool %s/%s has ", poolTenant, pool)); i >= 0 {
		msg = msg[i:]
	}
	return strings.TrimSuffix(msg, ": "+store.ErrExhausted.Error())
}

func (s *reservationService) GetReservation(ctx context.Context, req *connect.Request[apiv1.GetReservationRequest]) (*connect.Response[apiv1.GetReservationResponse], error) {
	r, err := ownReservation(ctx, s.store, callFrom(ctx).tenant(), req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetReservationResponse{Reservation: reservationProto(r)}), nil
}

func (s *reservationService) ListReservations(ctx context.Context, _ *connect.Request[apiv1.ListReservationsRequest]) (*connect.Response[apiv1.ListReservationsResponse], error) {
	rs, err := s.store.ListReservations(ctx, store.ReservationFilter{Tenant: callFrom(ctx).tenant(), Limit: listReservationsLimit})
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListReservationsResponse{}
	for _, r := range rs {
		res.Reservations = append(res.Reservations, reservationProto(r))
	}
	return connect.NewResponse(res), nil
}

func (s *reservationService) ExtendReservation(ctx context.Context, req *connect.Request[apiv1.ExtendReservationRequest]) (*connect.Response[apiv1.ExtendReservationResponse], error) {
	m := req.Msg
	call := callFrom(ctx)
	if (m.GetDuration() == nil) == (m.GetUntil() == nil) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("duration or until is required: give exactly one"))
	}
	if d := m.GetDuration(); d != nil && d.AsDuration() <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("duration %s is not positive: extend adds it to the reservation's end; release it to end it sooner", d.AsDuration()))
	}
	var r store.Reservation
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		cur, err := ownReservation(ctx, q, call.tenant(), m.GetId())
		if err != nil {
			return err
		}
		// Extending only ever moves the end later: an earlier end would
		// release GPUs under the extend permission, with a policy context
		// of 0 hours, where releasing needs its own. Checked against the
		// end read in this transaction, which the write below replaces, so
		// no concurrent extension slips in between.
		if !call.extendTo.After(cur.EndsAt) {
			return notLaterError(m, cur, call.extendTo)
		}
		if total := call.extendTo.Sub(cur.CreatedAt); total > maxReservation {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the new end makes reservation %s last %s: the limit is 366d", cur.ID, total.Round(time.Second)))
		}
		r, err = q.ExtendReservation(ctx, cur.ID, call.extendTo)
		if errors.Is(err, store.ErrConflict) {
			return endedError(cur)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.ExtendReservationResponse{Reservation: reservationProto(r)}), nil
}

func (s *reservationService) ReleaseReservation(ctx context.Context, req *connect.Request[apiv1.ReleaseReservationRequest]) (*connect.Response[apiv1.ReleaseReservationResponse], error) {
	call := callFrom(ctx)
	var r store.Reservation
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		cur, err := ownReservation(ctx, q, call.tenant(), req.Msg.GetId())
		if err != nil {
			return err
		}
		r, err = q.ReleaseReservation(ctx, cur.ID)
		if errors.Is(err, store.ErrConflict) {
			return endedError(cur)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s.notify(r)
	return connect.NewResponse(&apiv1.ReleaseReservationResponse{Reservation: reservationProto(r)}), nil
}

// reservationReader is what ownReservation reads from: the store or a
// transaction.
type reservationReader interface {
	GetReservation(ctx context.Context, id string) (store.Reservation, error)
}

// ownReservation returns the reservation id of tenant; another tenant's
// answers not_found exactly as a missing one.
func ownReservation(ctx context.Context, q reservationReader, tenant, id string) (store.Reservation, error) {
	r, err := q.GetReservation(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.Tenant != tenant) {
		return store.Reservation{}, notFoundEntity(typeReservation, tenant, id)
	}
	return r, err
}

// notLaterError refuses an extension whose new end is not after the
// reservation's current end. An until that asks for it is the caller's
// mistake; a duration that comes to it was added to an end that another
// extension has since moved (the authorizer read it before this call's
// transaction), so trying again adds it to the new end.
func notLaterError(m *apiv1.ExtendReservationRequest, cur store.Reservation, end time.Time) error {
	if m.GetUntil() != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("until %s is not after the reservation's end %s: extend only moves the end later; release it to end it sooner",
			end.UTC().Format(time.RFC3339Nano), cur.EndsAt.UTC().Format(time.RFC3339Nano)))
	}
	return connect.NewError(connect.CodeAborted, fmt.Errorf("reservation %s was extended to %s by another call meanwhile: try again", cur.ID, cur.EndsAt.UTC().Format(time.RFC3339Nano)))
}

// endedError is the failed_precondition for changing a reservation that
// ended.
func endedError(r store.Reservation) error {
	state := string(r.State)
	if r.Active() {
		state = "past its end time"
	}
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("reservation %s is %s", r.ID, state))
}

// reservationStates maps store states to the API's.
var reservationStates = map[store.ReservationState]apiv1.ReservationState{
	store.ReservationPlaced:   apiv1.ReservationState_RESERVATION_STATE_PLACED,
	store.ReservationBound:    apiv1.ReservationState_RESERVATION_STATE_BOUND,
	store.ReservationReleased: apiv1.ReservationState_RESERVATION_STATE_RELEASED,
	store.ReservationExpired:  apiv1.ReservationState_RESERVATION_STATE_EXPIRED,
}

// reservationProto converts a store reservation for the API.
func reservationProto(r store.Reservation) *apiv1.Reservation {
	state := reservationStates[r.State]
	return &apiv1.Reservation{
		Id: r.ID, Tenant: r.Tenant, Principal: r.Principal,
		PoolTenant: r.PoolTenant, Pool: r.Pool, NodeId: r.NodeID,
		Gpus: int32(r.GPUs), Model: r.ModelKey, State: state,
		DeviceUuids: r.DeviceUUIDs,
		CreateTime:  ts(r.CreatedAt), EndTime: ts(r.EndsAt),
		BoundTime: ts(r.BoundAt), ReleaseTime: ts(r.ReleasedAt),
		NodeIds: r.NodeIDs, CdiDevice: devices.DeviceName(r.ID),
	}
}
