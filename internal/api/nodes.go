package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/agent/inventory"
	"github.com/better-compute/better-compute/internal/store"
)

// Sessions is the gateway as the API sees it: what to tell it after a
// change. Tests pass a recorder; nil means no gateway in this process.
type Sessions interface {
	// Revoke closes the node's live session, if any, now.
	Revoke(nodeID string)
	// Notify tells the gateway the node has commands (or a spec) waiting.
	Notify(nodeID string)
}

// Command kinds bcd runs, with the default time a command may wait for its node.
var commandKinds = map[string]bool{
	"inventory.refresh": true,
	"diag.nvml":         true,
	"logs.collect":      true,
	"node.reboot":       true,
}

const (
	defaultCommandTimeout = 10 * time.Minute
	maxCommandTimeout     = 24 * time.Hour
)

// nodeService manages joined nodes.
type nodeService struct {
	base
	sessions Sessions // may be nil
}

var _ apiv1connect.NodeServiceHandler = (*nodeService)(nil)

// getNode reads a node and answers not_found unless it belongs to the
// call's tenant (the platform acts in any tenant by naming it).
func getNode(ctx context.Context, q store.Querier, call *Call, id string) (store.Node, error) {
	n, err := q.GetNode(ctx, id)
	if err == nil && n.Tenant != call.tenant() && !(call.Platform && call.Resource.Tenant == call.Caller.Tenant) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Node{}, notFoundAs(err, typeNode, call.tenant(), id)
	}
	return n, nil
}

func (s *nodeService) ListNodes(ctx context.Context, req *connect.Request[apiv1.ListNodesRequest]) (*connect.Response[apiv1.ListNodesResponse], error) {
	call := callFrom(ctx)
	tenant := call.tenant()
	if call.Platform && req.Msg.GetTenant() == "" {
		tenant = "" // the platform sees every node unless it names a tenant
	}
	nodes, err := s.store.ListNodes(ctx, tenant)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListNodesResponse{}
	for _, n := range nodes {
		p, err := nodeProto(n, nil)
		if err != nil {
			return nil, err
		}
		res.Nodes = append(res.Nodes, p)
	}
	return connect.NewResponse(res), nil
}

func (s *nodeService) GetNode(ctx context.Context, req *connect.Request[apiv1.GetNodeRequest]) (*connect.Response[apiv1.GetNodeResponse], error) {
	n, err := getNode(ctx, s.store, callFrom(ctx), req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	sections, err := s.store.ListInventorySections(ctx, n.ID)
	if err != nil {
		return nil, err
	}
	p, err := nodeProto(n, sections)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetNodeResponse{Node: p}), nil
}

func (s *nodeService) RevokeNode(ctx context.Context, req *connect.Request[apiv1.RevokeNodeRequest]) (*connect.Response[apiv1.RevokeNodeResponse], error) {
	call := callFrom(ctx)
	var n store.Node
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := getNode(ctx, q, call, req.Msg.GetId()); err != nil {
			return err
		}
		var err error
		n, err = q.RevokeNode(ctx, req.Msg.GetId())
		return err
	})
	if err != nil {
		return nil, err
	}
	// After the commit: a reconnect from here on is refused by the store,
	// and the live session, if this process holds it, closes now.
	if s.sessions != nil {
		s.sessions.Revoke(n.ID)
	}
	p, err := nodeProto(n, nil)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.RevokeNodeResponse{Node: p}), nil
}

func (s *nodeService) DeleteNode(ctx context.Context, req *connect.Request[apiv1.DeleteNodeRequest]) (*connect.Response[apiv1.DeleteNodeResponse], error) {
	call := callFrom(ctx)
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		n, err := getNode(ctx, q, call, req.Msg.GetId())
		if err != nil {
			return err
		}
		if n.State != store.NodeRevoked {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s is %s: revoke it first (better-compute nodes revoke %s)", n.ID, n.State, n.ID))
		}
		return q.DeleteNode(ctx, n.ID)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.DeleteNodeResponse{}), nil
}

func (s *nodeService) ExecCommand(ctx context.Context, req *connect.Request[apiv1.ExecCommandRequest]) (*connect.Response[apiv1.ExecCommandResponse], error) {
	m := req.Msg
	call := callFrom(ctx)
	if !commandKinds[m.GetKind()] {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unknown command kind %q: use one of inventory.refresh, diag.nvml, logs.collect, node.reboot", m.GetKind()))
	}
	timeout := defaultCommandTimeout
	if m.Timeout != nil {
		timeout = m.GetTimeout().AsDuration()
		if timeout < time.Second || timeout > maxCommandTimeout {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("timeout must be between 1s and %s", maxCommandTimeout))
		}
	}
	if err := checkLen("idempotency_key", m.GetIdempotencyKey(), 128); err != nil {
		return nil, err
	}
	for k, v := range m.GetArgs() {
		if err := checkLen("args["+k+"]", k+v, 1024); err != nil {
			return nil, err
		}
	}
	var c store.NodeCommand
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		n, err := getNode(ctx, q, call, m.GetNodeId())
		if err != nil {
			return err
		}
		if n.State == store.NodeRevoked {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s is revoked and runs nothing", n.ID))
		}
		if key := m.GetIdempotencyKey(); key != "" {
			if c, err = q.GetNodeCommandByKey(ctx, n.ID, key); err == nil {
				return nil // the same request again: the same command
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		now, err := q.Now(ctx)
		if err != nil {
			return err
		}
		c, err = q.CreateNodeCommand(ctx, store.NodeCommand{
			ID: newCommandID(), NodeID: n.ID, Kind: m.GetKind(), Args: m.GetArgs(),
			IdempotencyKey: m.GetIdempotencyKey(), Deadline: now.Add(timeout),
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.sessions != nil {
		s.sessions.Notify(c.NodeID)
	}
	return connect.NewResponse(&apiv1.ExecCommandResponse{Command: commandProto(c)}), nil
}

func (s *nodeService) GetCommand(ctx context.Context, req *connect.Request[apiv1.GetCommandRequest]) (*connect.Response[apiv1.GetCommandResponse], error) {
	call := callFrom(ctx)
	if _, err := getNode(ctx, s.store, call, req.Msg.GetNodeId()); err != nil {
		return nil, err
	}
	c, err := s.store.GetNodeCommand(ctx, req.Msg.GetId())
	if err == nil && c.NodeID != req.Msg.GetNodeId() {
		err = store.ErrNotFound
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("command %q not found on node %s", req.Msg.GetId(), req.Msg.GetNodeId()))
		}
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetCommandResponse{Command: commandProto(c)}), nil
}

func (s *nodeService) ListCommands(ctx context.Context, req *connect.Request[apiv1.ListCommandsRequest]) (*connect.Response[apiv1.ListCommandsResponse], error) {
	call := callFrom(ctx)
	if _, err := getNode(ctx, s.store, call, req.Msg.GetNodeId()); err != nil {
		return nil, err
	}
	limit := int(req.Msg.GetLimit())
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	cs, err := s.store.ListNodeCommands(ctx, req.Msg.GetNodeId(), limit)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListCommandsResponse{}
	for _, c := range cs {
		res.Commands = append(res.Commands, commandProto(c))
	}
	return connect.NewResponse(res), nil
}

func (s *nodeService) AdoptNode(ctx context.Context, req *connect.Request[apiv1.AdoptNodeRequest]) (*connect.Response[apiv1.AdoptNodeResponse], error) {
	call := callFrom(ctx)
	pool := req.Msg.GetPool()
	if err := checkName("pool", pool, false); err != nil {
		return nil, err
	}
	var n store.Node
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		cur, err := getNode(ctx, q, call, req.Msg.GetId())
		if err != nil {
			return err
		}
		// The pool must be the node's tenant's (the call's, unless the
		// platform acts on a node of another tenant from its own).
		if _, err := q.GetPool(ctx, cur.Tenant, pool); err != nil {
			return notFoundAs(err, typePool, cur.Tenant, pool)
		}
		n, err = q.AdoptNode(ctx, cur.ID, cur.Tenant, pool)
		return err
	})
	if err != nil {
		return nil, err
	}
	p, err := nodeProto(n, nil)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.AdoptNodeResponse{Node: p}), nil
}

func (s *nodeService) CordonNode(ctx context.Context, req *connect.Request[apiv1.CordonNodeRequest]) (*connect.Response[apiv1.CordonNodeResponse], error) {
	n, err := s.setCordoned(ctx, req.Msg.GetId(), true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CordonNodeResponse{Node: n}), nil
}

func (s *nodeService) UncordonNode(ctx context.Context, req *connect.Request[apiv1.UncordonNodeRequest]) (*connect.Response[apiv1.UncordonNodeResponse], error) {
	n, err := s.setCordoned(ctx, req.Msg.GetId(), false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.UncordonNodeResponse{Node: n}), nil
}

// setCordoned cordons or uncordons a node of the call's tenant.
func (s *nodeService) setCordoned(ctx context.Context, id string, cordoned bool) (*apiv1.Node, error) {
	call := callFrom(ctx)
	var n store.Node
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := getNode(ctx, q, call, id); err != nil {
			return err
		}
		var err error
		n, err = q.SetNodeCordoned(ctx, id, cordoned)
		return err
	})
	if err != nil {
		return nil, err
	}
	return nodeProto(n, nil)
}

// newCommandID makes a command id: random, so ids never collide across
// gateways and restarts.
func newCommandID() string {
	return "c-" + strings.ToLower(rand.Text())
}

var nodeStates = map[store.NodeState]apiv1.NodeState{
	store.NodeJoined:      apiv1.NodeState_NODE_STATE_JOINED,
	store.NodeReady:       apiv1.NodeState_NODE_STATE_READY,
	store.NodeUnreachable: apiv1.NodeState_NODE_STATE_UNREACHABLE,
	store.NodeRevoked:     apiv1.NodeState_NODE_STATE_REVOKED,
}

var commandStates = map[store.CommandState]apiv1.NodeCommandState{
	store.CommandQueued:    apiv1.NodeCommandState_NODE_COMMAND_STATE_QUEUED,
	store.CommandSent:      apiv1.NodeCommandState_NODE_COMMAND_STATE_SENT,
	store.CommandSucceeded: apiv1.NodeCommandState_NODE_COMMAND_STATE_SUCCEEDED,
	store.CommandFailed:    apiv1.NodeCommandState_NODE_COMMAND_STATE_FAILED,
	store.CommandExpired:   apiv1.NodeCommandState_NODE_COMMAND_STATE_EXPIRED,
	store.CommandUnknown:   apiv1.NodeCommandState_NODE_COMMAND_STATE_UNKNOWN,
}

// nodeProto converts a node; sections, when given, become its inventory.
func nodeProto(n store.Node, sections []store.InventorySection) (*apiv1.Node, error) {
	p := &apiv1.Node{
		Id:                    n.ID,
		Tenant:                n.Tenant,
		Hostname:              n.Hostname,
		State:                 nodeStates[n.State],
		Labels:                n.Labels,
		InventoryLabels:       n.InventoryLabels,
		Pool:                  n.Pool,
		BcdVersion:            n.BcdVersion,
		SessionEpoch:          n.SessionEpoch,
		LastSeenTime:          ts(n.LastSeenAt),
		CertificateExpireTime: ts(n.CertNotAfter),
		CreateTime:            ts(n.CreatedAt),
		RevokeTime:            ts(n.RevokedAt),
		SpecGeneration:        n.SpecGeneration,
		Cordoned:              n.Cordoned,
	}
	if len(n.Conditions) > 0 {
		// The gateway stores conditions as a JSON array of protojson objects.
		var raw []json.RawMessage
		if err := json.Unmarshal(n.Conditions, &raw); err != nil {
			return nil, fmt.Errorf("node %s conditions: %w", n.ID, err)
		}
		for _, r := range raw {
			c := &agentv1.Condition{}
			if err := protojson.Unmarshal(r, c); err != nil {
				return nil, fmt.Errorf("node %s conditions: %w", n.ID, err)
			}
			p.Conditions = append(p.Conditions, c)
		}
	}
	if len(sections) > 0 {
		secs := make([]*agentv1.InventorySection, len(sections))
		for i, s := range sections {
			secs[i] = &agentv1.InventorySection{Name: s.Name, Hash: s.Hash, Content: s.Content}
		}
		inv, err := inventory.Merge(secs)
		if err != nil {
			return nil, fmt.Errorf("node %s inventory: %w", n.ID, err)
		}
		p.Inventory = inv
	}
	return p, nil
}

func commandProto(c store.NodeCommand) *apiv1.NodeCommand {
	return &apiv1.NodeCommand{
		Id:         c.ID,
		NodeId:     c.NodeID,
		Kind:       c.Kind,
		Args:       c.Args,
		State:      commandStates[c.State],
		Output:     c.Output,
		Error:      c.Error,
		CreateTime: ts(c.CreatedAt),
		Deadline:   ts(c.Deadline),
		FinishTime: ts(c.FinishedAt),
	}
}

// checkLabels bounds labels: they end up in Cedar attributes and CLI flags.
func checkLabels(labels map[string]string) error {
	for k, v := range labels {
		if !objectNamePattern.MatchString(strings.ReplaceAll(k, "/", ".")) || len(v) > 128 {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("label %q=%q is not valid: keys are lowercase names (letters, digits, '.', '_', '-', '/'), values at most 128 bytes", k, v))
		}
	}
	return nil
}
