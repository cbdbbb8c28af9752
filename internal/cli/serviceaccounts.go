package cli

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func newServiceAccountsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "service-accounts",
		Aliases: []string{"sa"},
		Short:   "Manage a tenant's service accounts: CI jobs, agents",
		Long: "A service account is a non-human principal in a tenant, named in policies as\n" +
			"ServiceAccount::\"TENANT/NAME\". It acts through tokens: see `tokens create`.",
	}
	cmd.AddCommand(
		newServiceAccountsCreateCommand(g),
		newServiceAccountsListCommand(g),
		newServiceAccountsGetCommand(g),
		newServiceAccountsUpdateCommand(g),
		newServiceAccountsDeleteCommand(g),
	)
	return cmd
}

func newServiceAccountsCreateCommand(g *globals) *cobra.Command {
	req := &apiv1.CreateServiceAccountRequest{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Add a service account to a tenant",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.ServiceAccounts.CreateServiceAccount(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), serviceAccountTable(res.Msg.GetServiceAccount()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Description, "description", "", "what the service account is for")
	return cmd
}

func newServiceAccountsListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListServiceAccountsRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's service accounts",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.ServiceAccounts.ListServiceAccounts(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tDESCRIPTION\tGROUPS\tCREATED")
				for _, sa := range res.Msg.GetServiceAccounts() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", sa.GetName(), orDash(sa.GetDescription()), joinCell(sa.GetGroups()), formatTime(sa.GetCreateTime(), "-"))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newServiceAccountsGetCommand(g *globals) *cobra.Command {
	req := &apiv1.GetServiceAccountRequest{}
	cmd := &cobra.Command{
		Use:               "get NAME",
		Short:             "Show a service account and the groups it belongs to",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeServiceAccounts(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.ServiceAccounts.GetServiceAccount(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), serviceAccountTable(res.Msg.GetServiceAccount()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newServiceAccountsUpdateCommand(g *globals) *cobra.Command {
	req := &apiv1.UpdateServiceAccountRequest{}
	var description string
	cmd := &cobra.Command{
		Use:               "update NAME --description S",
		Short:             "Change a service account's description",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeServiceAccounts(g)),
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
			res, err := c.ServiceAccounts.UpdateServiceAccount(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), serviceAccountTable(res.Msg.GetServiceAccount()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&description, "description", "", "the new description")
	return cmd
}

func newServiceAccountsDeleteCommand(g *globals) *cobra.Command {
	req := &apiv1.DeleteServiceAccountRequest{}
	cmd := &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a service account with its group memberships and tokens",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeServiceAccounts(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.ServiceAccounts.DeleteServiceAccount(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintf(w, "deleted service account %s\n", args[0])
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// serviceAccountTable lays one service account out as field and value.
func serviceAccountTable(sa *apiv1.ServiceAccount) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "tenant\t%s\n", sa.GetTenant())
		fmt.Fprintf(w, "name\t%s\n", sa.GetName())
		fmt.Fprintf(w, "description\t%s\n", orDash(sa.GetDescription()))
		fmt.Fprintf(w, "groups\t%s\n", joinCell(sa.GetGroups()))
		fmt.Fprintf(w, "created\t%s\n", formatTime(sa.GetCreateTime(), "-"))
		fmt.Fprintf(w, "updated\t%s\n", formatTime(sa.GetUpdateTime(), "-"))
	}
}

func completeServiceAccounts(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
		res, err := c.ServiceAccounts.ListServiceAccounts(ctx, connect.NewRequest(&apiv1.ListServiceAccountsRequest{Tenant: tenant}))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, sa := range res.Msg.GetServiceAccounts() {
			names = append(names, sa.GetName())
		}
		return names, nil
	})
}
