package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// The lifetimes the API accepts for a join token.
const (
	minJoinTTL = time.Minute
	maxJoinTTL = 30 * 24 * time.Hour
)

func newJoinTokensCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "join-tokens",
		Short: "Create, list and revoke the tokens servers join with",
		Long: "A join token lets servers join as nodes: BCD_JOIN_TOKEN=T bcd join --server URL.\n" +
			"It is sealed: it carries the pin of this deployment's serving CA, so bcd\n" +
			"checks the server before it sends anything. It has a number of uses and\n" +
			"an expiry, both enforced atomically.",
	}
	cmd.AddCommand(newJoinTokensCreateCommand(g), newJoinTokensListCommand(g), newJoinTokensRevokeCommand(g))
	return cmd
}

func newJoinTokensCreateCommand(g *globals) *cobra.Command {
	req := &apiv1.CreateJoinTokenRequest{Labels: map[string]string{}}
	var (
		ttl    string
		labels []string
	)
	cmd := &cobra.Command{
		Use:   "create [--pool P] [--uses N] [--ttl D] [--label k=v]",
		Short: "Make a join token and print it, with the bcd join command, once",
		Example: "  better-compute join-tokens create --uses 10 --ttl 1h --label rack=r7\n" +
			"  better-compute join-tokens create --pool a100 --ttl 30m",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseDuration(ttl)
			if err != nil {
				return usageErrorf("--ttl %v: use a Go duration (1h, 30m) or days (7d)", err)
			}
			if d < minJoinTTL || d > maxJoinTTL {
				return usageErrorf("--ttl %s is out of range: a join token lives at least 1m and at most 30d", ttl)
			}
			if req.MaxUses < 1 {
				return usageErrorf("--uses must be at least 1")
			}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return usageErrorf("--label %q: use KEY=VALUE", l)
				}
				req.Labels[k] = v
			}
			req.Ttl = durationpb.New(d)
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.JoinTokens.CreateJoinToken(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				joinTokenTable(res.Msg.GetJoinToken())(w)
				fmt.Fprintln(w)
				fmt.Fprintln(w, "The token is shown only this once. On each server, run:")
				fmt.Fprintf(w, "  BCD_JOIN_TOKEN=%s bcd join --server %s\n", res.Msg.GetSecret(), res.Msg.GetGatewayUrl())
				fmt.Fprintln(w, "or print an install script: better-compute nodes install-script --token TOKEN")
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Pool, "pool", "", "a pool to adopt the nodes into")
	cmd.Flags().Int32Var(&req.MaxUses, "uses", 1, "how many servers may join with it")
	cmd.Flags().StringVar(&ttl, "ttl", "1h", "how long it works, 1m to 30d")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "a label KEY=VALUE for the joined nodes (repeatable)")
	cmd.Flags().StringVar(&req.Description, "description", "", "what the token is for")
	return cmd
}

func joinTokenTable(t *apiv1.JoinToken) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "id\t%s\n", t.GetId())
		fmt.Fprintf(w, "tenant\t%s\n", t.GetTenant())
		fmt.Fprintf(w, "pool\t%s\n", orDash(t.GetPool()))
		fmt.Fprintf(w, "uses\t%d of %d\n", t.GetUses(), t.GetMaxUses())
		fmt.Fprintf(w, "expires\t%s\n", formatTime(t.GetExpireTime(), "-"))
		fmt.Fprintf(w, "revoked\t%s\n", formatTime(t.GetRevokeTime(), "no"))
		fmt.Fprintf(w, "labels\t%s\n", orDash(labelList(t.GetLabels())))
	}
}

func labelList(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func newJoinTokensListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListJoinTokensRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List join tokens, newest first",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.JoinTokens.ListJoinTokens(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "ID\tPOOL\tUSES\tEXPIRES\tREVOKED\tLABELS")
				for _, t := range res.Msg.GetJoinTokens() {
					fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%s\t%s\n", t.GetId(), orDash(t.GetPool()), t.GetUses(), t.GetMaxUses(),
						formatTime(t.GetExpireTime(), "-"), formatTime(t.GetRevokeTime(), "no"), orDash(labelList(t.GetLabels())))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newJoinTokensRevokeCommand(g *globals) *cobra.Command {
	req := &apiv1.RevokeJoinTokenRequest{}
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Stop a join token from admitting more servers",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.JoinTokens.RevokeJoinToken(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), joinTokenTable(res.Msg.GetJoinToken()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}
