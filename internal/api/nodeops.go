package api

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/store"
)

// maxNodeLabels bounds a node's operator labels.
const maxNodeLabels = 64

// inventoryLabelPrefixes are the label namespaces the node's inventory
// owns (gpu.model, gpu.count, cpu.count, numa.nodes, memory.totalGiB): an
// operator label there would read as a fact about the hardware.
var inventoryLabelPrefixes = []string{"gpu.", "cpu.", "numa.", "memory."}

// DrainNode cordons the node, and with release ends every reservation that
// holds its GPUs, in one transaction. Each release is audited in the
// reservation's own tenant as well, where its owners look.
func (s *nodeService) DrainNode(ctx context.Context, req *connect.Request[apiv1.DrainNodeRequest]) (*connect.Response[apiv1.DrainNodeResponse], error) {
	call := callFrom(ctx)
	id, release := req.Msg.GetId(), req.Msg.GetRelease()
	var n store.Node
	var held []store.Reservation
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := getNode(ctx, q, call, id); err != nil {
			return err
		}
		var err error
		if n, err = q.SetNodeCordoned(ctx, id, true); err != nil {
			return err
		}
		allocs, err := q.NodeAllocations(ctx, id)
		if err != nil {
			return err
		}
		held = held[:0] // a retried transaction starts over
		for _, a := range allocs {
			var r store.Reservation
			if release {
				r, err = q.ReleaseReservation(ctx, a.ReservationID)
				if err == nil {
					_, err = q.InsertAuditEvent(ctx, store.AuditEvent{
						Tenant: r.Tenant, Principal: call.Caller.String(), Action: "compute:reservations:release",
						Resource: resourceFor(typeReservation, r.Tenant, r.ID).String(), Decision: "allow",
						Reason: "released by the drain of node " + id, RequestID: call.RequestID,
					})
				}
			} else {
				r, err = q.GetReservation(ctx, a.ReservationID)
			}
			if err != nil {
				return err
			}
			held = append(held, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if release && s.sessions != nil {
		notified := map[string]bool{}
		for _, r := range held {
			for _, node := range r.NodeIDs {
				if !notified[node] {
					notified[node] = true
					s.sessions.Notify(node)
				}
			}
		}
	}
	p, err := nodeProto(n, nil)
	if err != nil {
		return nil, err
	}
	res := &apiv1.DrainNodeResponse{Node: p}
	for _, r := range held {
		res.Reservations = append(res.Reservations, &apiv1.DrainedReservation{
			Id: r.ID, Tenant: r.Tenant, State: reservationStates[r.State], EndTime: ts(r.EndsAt),
		})
	}
	return connect.NewResponse(res), nil
}

// LabelNode sets and removes operator labels; the inventory's own labels
// are not the operator's to change.
func (s *nodeService) LabelNode(ctx context.Context, req *connect.Request[apiv1.LabelNodeRequest]) (*connect.Response[apiv1.LabelNodeResponse], error) {
	call := callFrom(ctx)
	m := req.Msg
	if len(m.GetSet()) == 0 && len(m.GetRemove()) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("nothing to change: give labels to set or keys to remove"))
	}
	if err := checkLabels(m.GetSet()); err != nil {
		return nil, err
	}
	for k := range m.GetSet() {
		if err := checkOperatorLabel(k); err != nil {
			return nil, err
		}
	}
	for _, k := range m.GetRemove() {
		if _, ok := m.GetSet()[k]; ok {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("label %q is both set and removed: choose one", k))
		}
		if err := checkOperatorLabel(k); err != nil {
			return nil, err
		}
	}
	var n store.Node
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		cur, err := getNode(ctx, q, call, m.GetId())
		if err != nil {
			return err
		}
		labels := maps.Clone(cur.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, m.GetSet())
		for _, k := range m.GetRemove() {
			delete(labels, k)
		}
		if len(labels) > maxNodeLabels {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("node %s would have %d labels; at most %d: remove some first", m.GetId(), len(labels), maxNodeLabels))
		}
		n, err = q.SetNodeLabels(ctx, cur.ID, labels)
		return err
	})
	if err != nil {
		return nil, err
	}
	p, err := nodeProto(n, nil)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.LabelNodeResponse{Node: p}), nil
}

// checkOperatorLabel refuses a key the operator may not set or remove.
func checkOperatorLabel(key string) error {
	if key == "" {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("a label key is empty"))
	}
	for _, p := range inventoryLabelPrefixes {
		if strings.HasPrefix(key, p) {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("label %q is in %s*, which the node's inventory sets: choose another key", key, p))
		}
	}
	return nil
}
