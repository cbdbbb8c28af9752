package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/devices"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/requestid"
	"github.com/better-compute/better-compute/internal/store"
)

// bindAction is the audit action of a reservation bound by its node, and
// of a binding claim refused.
const bindAction = "compute:reservations:bind"

// maxClaimText bounds what a node's text adds to a log line or an audit
// event.
const maxClaimText = 1024

// Bind outcomes, the label of bettercompute_gateway_allocation_claims_total.
const (
	// claimBound: the claim made a placed reservation bound.
	claimBound = "bound"
	// claimHeld: the reservation was bound already (the node reports what
	// it holds at every session start).
	claimHeld = "held"
	// claimStale: the reservation no longer holds GPUs of the node (it was
	// released or expired since the node applied its spec).
	claimStale = "stale"
	// claimRefused: the claim was forged or wrong, and was audited.
	claimRefused = "refused"
)

// nodeSpec is the NodeSpec the node must hold now: the node's generation
// and the allocations on it, read in that order, so that the allocations
// are at least as new as the generation they are sent under.
func (g *Gateway) nodeSpec(ctx context.Context, node store.Node) (*agentv1.NodeSpec, error) {
	allocs, err := g.st.NodeAllocations(ctx, node.ID)
	if err != nil {
		return nil, fmt.Errorf("read allocations: %w", err)
	}
	spec := &agentv1.NodeSpec{Generation: node.SpecGeneration}
	for _, a := range allocs {
		spec.Allocations = append(spec.Allocations, &agentv1.Allocation{ReservationId: a.ReservationID, GpuUuids: a.DeviceUUIDs})
	}
	return spec, nil
}

// storeSpecApplied acts on what the node reports it holds: each signed
// claim of a placed reservation's allocation makes it bound. A claim that
// does not verify, or does not match what the store booked on the node, is
// refused and audited; the rest of the report still counts.
func (g *Gateway) storeSpecApplied(ctx context.Context, s *session, sa *agentv1.SpecApplied) error {
	if e := sa.GetError(); e != "" {
		g.log.Warn("gateway: the node could not apply all of its spec", "node", s.nodeID, "generation", sa.GetGeneration(), "err", truncate(e, maxClaimText))
	}
	if len(sa.GetRemoved()) > 0 {
		g.log.Debug("gateway: the node unbound reservations", "node", s.nodeID, "reservations", sa.GetRemoved())
	}
	if len(sa.GetBound()) == 0 {
		return nil
	}
	allocs, err := g.st.NodeAllocations(ctx, s.nodeID)
	if err != nil {
		return fmt.Errorf("read allocations: %w", err)
	}
	byID := make(map[string]store.NodeAllocation, len(allocs))
	for _, a := range allocs {
		byID[a.ReservationID] = a
	}
	var bind []*agentv1.AllocationClaim
	for _, b := range sa.GetBound() {
		claim, err := s.verifyClaim(b)
		if err == nil {
			a, ok := byID[claim.GetReservationId()]
			switch {
			case !ok:
				g.metrics.claims.WithLabelValues(claimStale).Inc()
				continue
			case a.State == store.ReservationBound:
				g.metrics.claims.WithLabelValues(claimHeld).Inc()
				continue
			}
			err = checkClaim(claim, a)
		}
		if err != nil {
			if aerr := g.refuseClaim(ctx, s, claim.GetReservationId(), err); aerr != nil {
				return aerr
			}
			continue
		}
		bind = append(bind, claim)
	}
	if len(bind) == 0 {
		return nil
	}
	return g.bind(ctx, s.nodeID, bind)
}

// verifyClaim decodes an AllocationBound's claim and checks that it is the
// session's node's, signed with the key of the certificate the session was
// opened with, for this session. The claim comes back even on error, as
// far as it decoded, for the audit event.
func (s *session) verifyClaim(b *agentv1.AllocationBound) (*agentv1.AllocationClaim, error) {
	claim := &agentv1.AllocationClaim{}
	if err := proto.Unmarshal(b.GetClaim(), claim); err != nil {
		return claim, fmt.Errorf("the claim is malformed: %v", err)
	}
	certs := s.conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return claim, errors.New("the session has no node certificate")
	}
	if err := pki.VerifyAllocationClaim(certs[0].PublicKey, b.GetClaim(), b.GetSignature()); err != nil {
		return claim, err
	}
	if claim.GetNodeId() != s.nodeID {
		return claim, fmt.Errorf("the claim names node %q, not this session's", claim.GetNodeId())
	}
	if claim.GetSessionEpoch() != s.epoch {
		return claim, fmt.Errorf("the claim is for session epoch %d, not this session's %d", claim.GetSessionEpoch(), s.epoch)
	}
	return claim, nil
}

// checkClaim compares a verified claim with the allocation the store booked
// on the node. The GPUs compare as sets: the node sorts its UUIDs byte by
// byte, the store in its collation, which on PostgreSQL may order "GPU-a"
// and "GPU-B" the other way.
func checkClaim(claim *agentv1.AllocationClaim, a store.NodeAllocation) error {
	if !slices.Equal(slices.Sorted(slices.Values(claim.GetGpuUuids())), slices.Sorted(slices.Values(a.DeviceUUIDs))) {
		return fmt.Errorf("the claim lists GPUs %s; the reservation holds %s on this node",
			strings.Join(claim.GetGpuUuids(), ","), strings.Join(a.DeviceUUIDs, ","))
	}
	if want := devices.DeviceName(a.ReservationID); claim.GetCdiDevice() != want {
		return fmt.Errorf("the claim names CDI device %q, not %q", claim.GetCdiDevice(), want)
	}
	return nil
}

// bind makes the claimed reservations bound, each with its audit event in
// the reservation's tenant, in one transaction: a node reports its
// allocations together, and one write instead of one per claim keeps the
// store's writer free for placements. A reservation that left placed
// meanwhile (released, or bound through another of its nodes) is left as
// it is.
func (g *Gateway) bind(ctx context.Context, nodeID string, claims []*agentv1.AllocationClaim) error {
	var bound, stale []string
	err := g.st.InSharedTx(ctx, func(ctx context.Context, q store.Querier) error {
		bound, stale = bound[:0], stale[:0]
		for _, c := range claims {
			r, err := q.BindReservation(ctx, c.GetReservationId(), nodeID)
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				stale = append(stale, c.GetReservationId())
				continue
			}
			if err != nil {
				return err
			}
			if _, err := q.InsertAuditEvent(ctx, store.AuditEvent{
				Tenant: r.Tenant, Action: bindAction, Resource: reservationRef(r.Tenant, r.ID), Decision: "allow",
				Reason:    fmt.Sprintf("node %s bound it as CDI device %s", nodeID, c.GetCdiDevice()),
				RequestID: requestid.From(ctx),
			}); err != nil {
				return err
			}
			bound = append(bound, r.ID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bind %d reservations: %w", len(claims), err)
	}
	g.metrics.claims.WithLabelValues(claimStale).Add(float64(len(stale)))
	g.metrics.claims.WithLabelValues(claimBound).Add(float64(len(bound)))
	for _, id := range bound {
		g.log.Info("gateway: reservation bound", "node", nodeID, "reservation", id)
	}
	return nil
}

// refuseClaim records a refused claim in the node's tenant's audit log:
// the node is the one that sent it, and its owner is who must look.
func (g *Gateway) refuseClaim(ctx context.Context, s *session, reservationID string, cause error) error {
	node, err := g.st.GetNode(ctx, s.nodeID)
	if err != nil {
		return fmt.Errorf("read node: %w", err)
	}
	reason := truncate(fmt.Sprintf("refused an AllocationBound for reservation %q: %v", reservationID, cause), maxClaimText)
	g.log.Warn("gateway: refused an allocation claim", "node", s.nodeID, "reservation", reservationID, "err", cause)
	if _, err := g.st.InsertAuditEvent(ctx, store.AuditEvent{
		Tenant: node.Tenant, Action: bindAction, Resource: joinNodeRef(node.Tenant, node.ID), Decision: "deny",
		Reason: reason, RequestID: requestid.From(ctx),
	}); err != nil {
		return fmt.Errorf("audit a refused claim: %w", err)
	}
	// Counted once audited, so that whoever sees the count sees the event.
	g.metrics.claims.WithLabelValues(claimRefused).Inc()
	return nil
}

// reservationRef is the reservation's Cedar entity.
func reservationRef(tenant, id string) string {
	return iam.ScopedRef("Reservation", tenant, id).String()
}
