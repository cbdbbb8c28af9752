package console

import (
	"net/http"
	"strings"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// nodesData is the node list's model.
type nodesData struct {
	Nodes []*apiv1.Node
	// Filters as given; States and Pools are the choices.
	State, Pool, Label string
	States, Pools      []string
	Total              int
}

func (s *server) nodes(w http.ResponseWriter, r *http.Request, sess *session) error {
	q := r.URL.Query()
	d := nodesData{State: q.Get("state"), Pool: q.Get("pool"), Label: strings.TrimSpace(q.Get("label"))}
	res, err := sess.api.Nodes.ListNodes(r.Context(), connect.NewRequest(&apiv1.ListNodesRequest{}))
	if err != nil {
		return err
	}
	// label is key or key=value; either matches operator and inventory labels.
	key, value, hasValue := strings.Cut(d.Label, "=")
	pools := map[string]bool{}
	for _, n := range res.Msg.GetNodes() {
		if n.GetPool() != "" {
			pools[n.GetPool()] = true
		}
		if d.State != "" && nodeState(n.GetState()) != d.State {
			continue
		}
		if d.Pool != "" && n.GetPool() != d.Pool {
			continue
		}
		if d.Label != "" {
			v, ok := n.GetLabels()[key]
			if !ok {
				v, ok = n.GetInventoryLabels()[key]
			}
			if !ok || hasValue && v != value {
				continue
			}
		}
		d.Nodes = append(d.Nodes, n)
	}
	d.Total = len(res.Msg.GetNodes())
	d.Pools = sortedKeys(pools)
	for _, st := range []apiv1.NodeState{apiv1.NodeState_NODE_STATE_JOINED, apiv1.NodeState_NODE_STATE_READY, apiv1.NodeState_NODE_STATE_UNREACHABLE, apiv1.NodeState_NODE_STATE_REVOKED} {
		d.States = append(d.States, nodeState(st))
	}
	s.render(w, r, sess, http.StatusOK, "nodes", "Nodes", d)
	return nil
}

// nodeData is a node page's model.
type nodeData struct {
	Node     *apiv1.Node
	GPUs     []gpuRow
	Commands []*apiv1.NodeCommand
	// CommandsHidden is why commands are not shown, if they are not.
	CommandsHidden string
}

// gpuRow is one of a node's GPUs and the reservation holding it, if the
// caller may see that reservation.
type gpuRow struct {
	GPU         *gpuView
	Reservation *apiv1.Reservation
}

// gpuView is the part of a GPU the page shows.
type gpuView struct {
	Index       int32
	UUID, Name  string
	MemoryBytes int64
}

func (s *server) node(w http.ResponseWriter, r *http.Request, sess *session) error {
	ctx := r.Context()
	id := r.PathValue("id")
	res, err := sess.api.Nodes.GetNode(ctx, connect.NewRequest(&apiv1.GetNodeRequest{Id: id}))
	if err != nil {
		return err
	}
	d := nodeData{Node: res.Msg.GetNode()}
	held := map[string]*apiv1.Reservation{}
	rs, err := s.reservationsOf(ctx, sess)
	if err != nil {
		return err
	}
	for _, rv := range rs {
		if !active(rv.GetState()) {
			continue
		}
		for _, u := range rv.GetDeviceUuids() {
			held[u] = rv
		}
	}
	for _, g := range d.Node.GetInventory().GetGpus().GetDevices() {
		d.GPUs = append(d.GPUs, gpuRow{
			GPU:         &gpuView{Index: g.GetIndex(), UUID: g.GetUuid(), Name: g.GetName(), MemoryBytes: g.GetMemoryBytes()},
			Reservation: held[g.GetUuid()],
		})
	}
	cmds, err := sess.api.Nodes.ListCommands(ctx, connect.NewRequest(&apiv1.ListCommandsRequest{NodeId: id, Limit: 20}))
	switch {
	case err == nil:
		d.Commands = cmds.Msg.GetCommands()
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		d.CommandsHidden = message(err)
	default:
		return err
	}
	s.render(w, r, sess, http.StatusOK, "node", "Node "+d.Node.GetHostname(), d)
	return nil
}
