package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func newPoolsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "Manage pools of nodes and offer them to tenants",
		Long: "A pool is a named set of a tenant's nodes that reservations draw from. Nodes\n" +
			"join it with `nodes adopt ID --pool P`; offering it to another tenant lets that\n" +
			"tenant's users reserve its GPUs. `pools list` also shows the pools offered to\n" +
			"your tenant.",
	}
	cmd.AddCommand(
		newPoolsCreateCommand(g),
		newPoolsListCommand(g),
		newPoolsGetCommand(g),
		newPoolsUpdateCommand(g),
		newPoolsDeleteCommand(g),
		newPoolsOfferCommand(g, "offer", "Let another tenant's users reserve from a pool"),
		newPoolsOfferCommand(g, "unoffer", "Withdraw a pool's offer to a tenant; its reservations stay"),
	)
	return cmd
}

// completePools completes the names of the tenant's own pools.
func completePools(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
		res, err := c.Pools.ListPools(ctx, connect.NewRequest(&apiv1.ListPoolsRequest{Tenant: tenant}))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, p := range res.Msg.GetPools() {
			if tenant == "" || p.GetTenant() == tenant {
				names = append(names, p.GetName())
			}
		}
		return names, nil
	})
}

func newPoolsCreateCommand(g *globals) *cobra.Command {
	req := &apiv1.CreatePoolRequest{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Add a pool to a tenant",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Pools.CreatePool(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), poolTable(res.Msg.GetPool()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Description, "description", "", "what the pool is for")
	return cmd
}

func newPoolsListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListPoolsRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's pools and the pools offered to it",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Pools.ListPools(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "TENANT\tNAME\tFREE GPUS\tOFFERED TO\tDESCRIPTION")
				for _, p := range res.Msg.GetPools() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.GetTenant(), p.GetName(), freeGPUs(p),
						orDash(strings.Join(p.GetOfferedTo(), ",")), orDash(p.GetDescription()))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newPoolsGetCommand(g *globals) *cobra.Command {
	req := &apiv1.GetPoolRequest{}
	cmd := &cobra.Command{
		Use:               "get NAME",
		Short:             "Show a pool with its offers and free GPUs",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completePools(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Pools.GetPool(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), poolTable(res.Msg.GetPool()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newPoolsUpdateCommand(g *globals) *cobra.Command {
	req := &apiv1.UpdatePoolRequest{}
	var description string
	cmd := &cobra.Command{
		Use:               "update NAME --description S",
		Short:             "Change a pool's description",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completePools(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			if !cmd.Flags().Changed("description") {
				return usageErrorf("nothing to update: pass --description")
			}
			req.Description = &description
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Pools.UpdatePool(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), poolTable(res.Msg.GetPool()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&description, "description", "", "the new description")
	return cmd
}

func newPoolsDeleteCommand(g *globals) *cobra.Command {
	req := &apiv1.DeletePoolRequest{}
	cmd := &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a pool with its offers; it must have no nodes and no active reservations",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completePools(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Pools.DeletePool(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintf(w, "deleted pool %s\n", args[0])
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// newPoolsOfferCommand makes pools offer or pools unoffer.
func newPoolsOfferCommand(g *globals, verb, short string) *cobra.Command {
	var tenant, to string
	cmd := &cobra.Command{
		Use:               verb + " NAME --to TENANT",
		Short:             short,
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completePools(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usageErrorf("--to is required: name the tenant")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var pool *apiv1.Pool
			var doc document
			if verb == "offer" {
				res, err := c.Pools.OfferPool(cmd.Context(), connect.NewRequest(&apiv1.OfferPoolRequest{Tenant: tenant, Name: args[0], ToTenant: to}))
				if err != nil {
					return callError(c, err)
				}
				pool, doc = res.Msg.GetPool(), docOf(res.Msg)
			} else {
				res, err := c.Pools.UnofferPool(cmd.Context(), connect.NewRequest(&apiv1.UnofferPoolRequest{Tenant: tenant, Name: args[0], ToTenant: to}))
				if err != nil {
					return callError(c, err)
				}
				pool, doc = res.Msg.GetPool(), docOf(res.Msg)
			}
			return g.printer(cmd).print(doc, poolTable(pool))
		},
	}
	addTenantFlag(g, cmd, &tenant)
	cmd.Flags().StringVar(&to, "to", "", "the tenant to offer the pool to (or withdraw it from)")
	return cmd
}

// freeGPUs shows a pool's free GPUs as MODEL=N pairs, by model.
func freeGPUs(p *apiv1.Pool) string {
	free := p.GetFreeGpus()
	keys := make([]string, 0, len(free))
	for k := range free {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, free[k])
	}
	return orDash(strings.Join(parts, ","))
}

func poolTable(p *apiv1.Pool) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "tenant\t%s\n", p.GetTenant())
		fmt.Fprintf(w, "name\t%s\n", p.GetName())
		fmt.Fprintf(w, "description\t%s\n", orDash(p.GetDescription()))
		fmt.Fprintf(w, "offered to\t%s\n", orDash(strings.Join(p.GetOfferedTo(), ", ")))
		fmt.Fprintf(w, "free gpus\t%s\n", freeGPUs(p))
		fmt.Fprintf(w, "created\t%s\n", formatTime(p.GetCreateTime(), "-"))
		fmt.Fprintf(w, "updated\t%s\n", formatTime(p.GetUpdateTime(), "-"))
	}
}
