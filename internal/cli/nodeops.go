package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// drainPoll is how often drain --wait asks whether the node is empty.
const drainPoll = time.Second

func newNodesDrainCommand(g *globals) *cobra.Command {
	req := &apiv1.DrainNodeRequest{}
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "drain ID [--release] [--wait DURATION]",
		Short: "Cordon a node and list, end or wait out the reservations on it",
		Long: "drain cordons the node, so that it gets no new reservations, and lists the\n" +
			"reservations that still hold its GPUs, whichever tenant made them. --release\n" +
			"ends them now (each is audited in its own tenant, and the node unbinds them);\n" +
			"--wait waits until none is left, for at most the duration given.",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait < 0 {
				return usageErrorf("--wait %s: give a positive duration, such as 30m", wait)
			}
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			deadline := time.Now().Add(wait)
			for {
				res, err := c.Nodes.DrainNode(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return callError(c, err)
				}
				if wait == 0 || req.Release || len(res.Msg.GetReservations()) == 0 {
					return g.printer(cmd).print(docOf(res.Msg), drainTable(res.Msg))
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("node %s still holds %d reservations after %s: wait longer, or drain it with --release", req.Id, len(res.Msg.GetReservations()), wait)
				}
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(drainPoll):
				}
			}
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().BoolVar(&req.Release, "release", false, "end the reservations on the node now")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait until no reservation holds the node's GPUs, for at most this long")
	return cmd
}

// drainTable shows the drained node and its reservations.
func drainTable(res *apiv1.DrainNodeResponse) table {
	return func(w io.Writer) {
		n := res.GetNode()
		fmt.Fprintf(w, "node\t%s (cordoned)\n", n.GetId())
		if len(res.GetReservations()) == 0 {
			fmt.Fprintf(w, "reservations\tnone\n")
		}
		for i, r := range res.GetReservations() {
			label := ""
			if i == 0 {
				label = "reservations"
			}
			fmt.Fprintf(w, "%s\t%s of %s, %s, ends %s\n", label, r.GetId(), r.GetTenant(),
				reservationState(r.GetState()), formatTime(r.GetEndTime(), "-"))
		}
	}
}

func newNodesLabelCommand(g *globals) *cobra.Command {
	req := &apiv1.LabelNodeRequest{}
	cmd := &cobra.Command{
		Use:   "label ID KEY=VALUE... [KEY-...]",
		Short: "Set or remove a node's labels",
		Long: "label sets KEY=VALUE labels on a node and removes KEY- ones. Keys under gpu.,\n" +
			"cpu., numa. and memory. come from the node's inventory and cannot be changed.",
		Example:           "  better-compute nodes label n-abc rack=r7 zone=a\n  better-compute nodes label n-abc zone-",
		Args:              minArgs(2),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			req.Set = map[string]string{}
			for _, a := range args[1:] {
				if k, v, ok := strings.Cut(a, "="); ok && k != "" {
					req.Set[k] = v
				} else if k, ok := strings.CutSuffix(a, "-"); ok && k != "" && !strings.Contains(k, "=") {
					req.Remove = append(req.Remove, k)
				} else {
					return usageErrorf("%q: use KEY=VALUE to set a label or KEY- to remove one", a)
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Nodes.LabelNode(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), nodeTable(res.Msg.GetNode()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}
