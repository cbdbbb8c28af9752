package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func newNodesCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List, inspect and revoke nodes, and run commands on them",
		Long: "A node is a server running bcd that joined with a join token. It holds one\n" +
			"session to the gateway; it is ready while it is heard from, unreachable after\n" +
			"three silent heartbeat intervals, and revoked for good once revoked.",
	}
	cmd.AddCommand(
		newNodesListCommand(g),
		newNodesGetCommand(g),
		newNodesRevokeCommand(g),
		newNodesDeleteCommand(g),
		newNodesExecCommand(g),
		newNodesCommandsCommand(g),
		newNodesInstallScriptCommand(g),
		newNodesAdoptCommand(g),
		newNodesCordonCommand(g, "cordon", "Stop a node from getting new reservations; it keeps those it has"),
		newNodesCordonCommand(g, "uncordon", "Let a cordoned node get new reservations again"),
		newNodesDrainCommand(g),
		newNodesLabelCommand(g),
	)
	return cmd
}

// completeNodes completes node ids.
func completeNodes(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
		res, err := c.Nodes.ListNodes(ctx, connect.NewRequest(&apiv1.ListNodesRequest{Tenant: tenant}))
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, n := range res.Msg.GetNodes() {
			ids = append(ids, n.GetId())
		}
		return ids, nil
	})
}

// nodeState is a node's state as a word.
func nodeState(s apiv1.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATE_"))
}

func newNodesListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListNodesRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List nodes (the platform sees every tenant's)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Nodes.ListNodes(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "ID\tHOSTNAME\tSTATE\tTENANT\tPOOL\tLAST SEEN\tBCD")
				for _, n := range res.Msg.GetNodes() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.GetId(), orDash(n.GetHostname()), nodeState(n.GetState()),
						n.GetTenant(), orDash(n.GetPool()), formatTime(n.GetLastSeenTime(), "never"), orDash(n.GetBcdVersion()))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newNodesGetCommand(g *globals) *cobra.Command {
	req := &apiv1.GetNodeRequest{}
	cmd := &cobra.Command{
		Use:               "get ID",
		Short:             "Show a node with its inventory and conditions",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Nodes.GetNode(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), nodeTable(res.Msg.GetNode()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// nodeTable lays a node out for people: identity, state, hardware, GPUs.
func nodeTable(n *apiv1.Node) table {
	return func(w io.Writer) {
		inv := n.GetInventory()
		fmt.Fprintf(w, "id\t%s\n", n.GetId())
		fmt.Fprintf(w, "hostname\t%s\n", orDash(n.GetHostname()))
		fmt.Fprintf(w, "state\t%s\n", nodeState(n.GetState()))
		fmt.Fprintf(w, "tenant\t%s\n", n.GetTenant())
		fmt.Fprintf(w, "pool\t%s\n", orDash(n.GetPool()))
		fmt.Fprintf(w, "cordoned\t%t\n", n.GetCordoned())
		keys := make([]string, 0, len(n.GetLabels()))
		for k := range n.GetLabels() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "label\t%s=%s\n", k, n.GetLabels()[k])
		}
		if l := n.GetInventoryLabels(); len(l) > 0 {
			fmt.Fprintf(w, "inventory labels\t%s\n", labelList(l))
		}
		fmt.Fprintf(w, "bcd\t%s\n", orDash(n.GetBcdVersion()))
		fmt.Fprintf(w, "session epoch\t%d\n", n.GetSessionEpoch())
		fmt.Fprintf(w, "last seen\t%s\n", formatTime(n.GetLastSeenTime(), "never"))
		fmt.Fprintf(w, "certificate expires\t%s\n", formatTime(n.GetCertificateExpireTime(), "-"))
		if inv != nil {
			h, cpu, mem := inv.GetHost(), inv.GetCpu(), inv.GetMemory()
			fmt.Fprintf(w, "os\t%s (kernel %s)\n", orDash(h.GetOs()), orDash(h.GetKernel()))
			fmt.Fprintf(w, "cpu\t%s: %d sockets, %d cores, %d threads, %d NUMA nodes\n", orDash(cpu.GetModel()), cpu.GetSockets(), cpu.GetCores(), cpu.GetThreads(), len(cpu.GetNumaNodes()))
			fmt.Fprintf(w, "memory\t%d GiB\n", mem.GetTotalBytes()>>30)
			if h.GetFake() {
				fmt.Fprintf(w, "hardware\tfakehw (a description, not this host's devices)\n")
			}
			for _, gpu := range inv.GetGpus().GetDevices() {
				fmt.Fprintf(w, "gpu %d\t%s %s (%d GiB)\n", gpu.GetIndex(), gpu.GetUuid(), gpu.GetName(), gpu.GetMemoryBytes()>>30)
			}
		}
		for _, cond := range n.GetConditions() {
			state := "ok"
			if !cond.GetOk() {
				state = "NOT OK"
			}
			fmt.Fprintf(w, "condition\t%s: %s %s\n", cond.GetType(), state, cond.GetMessage())
		}
	}
}

func newNodesAdoptCommand(g *globals) *cobra.Command {
	req := &apiv1.AdoptNodeRequest{}
	cmd := &cobra.Command{
		Use:               "adopt ID --pool P",
		Short:             "Put a node into a pool of its tenant, so that its GPUs can be reserved",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			if req.Pool == "" {
				return usageErrorf("--pool is required: name the pool to adopt the node into")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Nodes.AdoptNode(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), nodeTable(res.Msg.GetNode()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Pool, "pool", "", "the pool to adopt the node into")
	_ = cmd.RegisterFlagCompletionFunc("pool", completePools(g))
	return cmd
}

// newNodesCordonCommand makes nodes cordon or nodes uncordon.
func newNodesCordonCommand(g *globals, verb, short string) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:               verb + " ID",
		Short:             short,
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var node *apiv1.Node
			var doc document
			if verb == "cordon" {
				res, err := c.Nodes.CordonNode(cmd.Context(), connect.NewRequest(&apiv1.CordonNodeRequest{Tenant: tenant, Id: args[0]}))
				if err != nil {
					return callError(c, err)
				}
				node, doc = res.Msg.GetNode(), docOf(res.Msg)
			} else {
				res, err := c.Nodes.UncordonNode(cmd.Context(), connect.NewRequest(&apiv1.UncordonNodeRequest{Tenant: tenant, Id: args[0]}))
				if err != nil {
					return callError(c, err)
				}
				node, doc = res.Msg.GetNode(), docOf(res.Msg)
			}
			return g.printer(cmd).print(doc, nodeTable(node))
		},
	}
	addTenantFlag(g, cmd, &tenant)
	return cmd
}

func newNodesRevokeCommand(g *globals) *cobra.Command {
	req := &apiv1.RevokeNodeRequest{}
	cmd := &cobra.Command{
		Use:               "revoke ID",
		Short:             "Revoke a node: its session closes and it can never reconnect",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Nodes.RevokeNode(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), nodeTable(res.Msg.GetNode()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newNodesDeleteCommand(g *globals) *cobra.Command {
	req := &apiv1.DeleteNodeRequest{}
	cmd := &cobra.Command{
		Use:               "delete ID",
		Short:             "Delete a revoked node's record",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Nodes.DeleteNode(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) { fmt.Fprintf(w, "deleted node %s\n", req.Id) })
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newNodesExecCommand(g *globals) *cobra.Command {
	req := &apiv1.ExecCommandRequest{Args: map[string]string{}}
	var (
		args    []string
		timeout time.Duration
		noWait  bool
	)
	cmd := &cobra.Command{
		Use:   "exec-command NODE KIND",
		Short: "Run a command on a node and wait for its result",
		Long: "Kinds: inventory.refresh, diag.nvml (GPU health), logs.collect (--arg lines=N),\n" +
			"node.reboot (--arg confirm=yes). A command for an offline node waits until its\n" +
			"timeout, then fails expired; a node never runs the same command twice.",
		Example: "  better-compute nodes exec-command n-abc diag.nvml\n" +
			"  better-compute nodes exec-command n-abc logs.collect --arg lines=500",
		Args:              exactArgs(2),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, pos []string) error {
			req.NodeId, req.Kind = pos[0], pos[1]
			for _, a := range args {
				k, v, ok := strings.Cut(a, "=")
				if !ok || k == "" {
					return usageErrorf("--arg %q: use KEY=VALUE", a)
				}
				req.Args[k] = v
			}
			if timeout < 0 {
				return usageErrorf("--timeout must be positive")
			}
			if timeout > 0 {
				req.Timeout = durationpb.New(timeout)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Nodes.ExecCommand(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			command := res.Msg.GetCommand()
			if !noWait {
				if command, err = waitCommand(cmd.Context(), c, command); err != nil {
					return err
				}
			}
			if err := g.printer(cmd).print(docOf(command), commandTable(command)); err != nil {
				return err
			}
			switch command.GetState() {
			case apiv1.NodeCommandState_NODE_COMMAND_STATE_FAILED, apiv1.NodeCommandState_NODE_COMMAND_STATE_EXPIRED, apiv1.NodeCommandState_NODE_COMMAND_STATE_UNKNOWN:
				return fmt.Errorf("command %s %s: %s", command.GetId(), commandState(command.GetState()), orDash(command.GetError()))
			}
			return nil
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringArrayVar(&args, "arg", nil, "an argument KEY=VALUE (repeatable)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long the command may wait for its node (default 10m)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "queue the command and print it without waiting for the result")
	cmd.Flags().StringVar(&req.IdempotencyKey, "idempotency-key", "", "a key that makes retrying this call safe")
	_ = cmd.RegisterFlagCompletionFunc("timeout", cobra.NoFileCompletions)
	return cmd
}

// waitCommand polls until the command finished or ctx ends.
func waitCommand(ctx context.Context, c *client.Client, command *apiv1.NodeCommand) (*apiv1.NodeCommand, error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		switch command.GetState() {
		case apiv1.NodeCommandState_NODE_COMMAND_STATE_QUEUED, apiv1.NodeCommandState_NODE_COMMAND_STATE_SENT:
		default:
			return command, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped waiting for command %s (still %s): %w", command.GetId(), commandState(command.GetState()), ctx.Err())
		case <-tick.C:
		}
		res, err := c.Nodes.GetCommand(ctx, connect.NewRequest(&apiv1.GetCommandRequest{NodeId: command.GetNodeId(), Id: command.GetId()}))
		if err != nil {
			return nil, callError(c, err)
		}
		command = res.Msg.GetCommand()
	}
}

func commandState(s apiv1.NodeCommandState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_COMMAND_STATE_"))
}

func commandTable(c *apiv1.NodeCommand) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "command\t%s\n", c.GetId())
		fmt.Fprintf(w, "node\t%s\n", c.GetNodeId())
		fmt.Fprintf(w, "kind\t%s\n", c.GetKind())
		fmt.Fprintf(w, "state\t%s\n", commandState(c.GetState()))
		if c.GetError() != "" {
			fmt.Fprintf(w, "error\t%s\n", c.GetError())
		}
		if out := strings.TrimRight(c.GetOutput(), "\n"); out != "" {
			fmt.Fprintln(w, "output\t")
			for _, line := range strings.Split(out, "\n") {
				fmt.Fprintf(w, "  %s\n", line)
			}
		}
	}
}

func newNodesCommandsCommand(g *globals) *cobra.Command {
	req := &apiv1.ListCommandsRequest{}
	cmd := &cobra.Command{
		Use:               "commands NODE",
		Short:             "List a node's recent commands, newest first",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeNodes(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.NodeId = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Nodes.ListCommands(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "ID\tKIND\tSTATE\tCREATED\tFINISHED\tERROR")
				for _, c := range res.Msg.GetCommands() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.GetId(), c.GetKind(), commandState(c.GetState()),
						formatTime(c.GetCreateTime(), "-"), formatTime(c.GetFinishTime(), "-"), orDash(c.GetError()))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().Int32Var(&req.Limit, "limit", 50, "at most this many (1 to 500)")
	return cmd
}

func newNodesInstallScriptCommand(g *globals) *cobra.Command {
	req := &apiv1.GetInstallScriptRequest{}
	cmd := &cobra.Command{
		Use:   "install-script --token JOIN_TOKEN",
		Short: "Print a shell script that installs bcd on a server and joins it",
		Example: "  better-compute nodes install-script --token \"$(better-compute join-tokens create --ttl 1h -o json | jq -r .secret)\" | ssh root@gpu-7 sh\n" +
			"  better-compute nodes install-script --token bcj_... > install.sh && sh install.sh --root /tmp/img --no-start",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.JoinToken == "" {
				return usageErrorf("install-script needs --token: a join token from better-compute join-tokens create")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.JoinTokens.GetInstallScript(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return printText(g.printer(cmd), docOf(res.Msg), res.Msg.GetScript())
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.JoinToken, "token", "", "the join token the script joins with (required)")
	return cmd
}
