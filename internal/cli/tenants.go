package cli

import (
	"fmt"
	"io"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func newTenantsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Manage tenants: the organizations using the fleet",
		Long: "A tenant is an organization using the fleet. Creating one also creates its\n" +
			"\"admins\" group and the \"tenant-admins\" policy that lets that group do\n" +
			"everything in the tenant. The platform tenant operates the fleet and sees\n" +
			"every tenant.",
	}
	cmd.AddCommand(
		newTenantsCreateCommand(g),
		newTenantsListCommand(g),
		newTenantsGetCommand(g),
		newTenantsUpdateCommand(g),
		newTenantsDeleteCommand(g),
	)
	return cmd
}

func newTenantsCreateCommand(g *globals) *cobra.Command {
	var displayName string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant with its admins group and tenant-admins policy",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tenants.CreateTenant(cmd.Context(), connect.NewRequest(&apiv1.CreateTenantRequest{Name: args[0], DisplayName: displayName}))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), tenantTable(res.Msg.GetTenant()))
		},
	}
	cmd.Flags().StringVar(&displayName, "display-name", "", "a human-friendly name (default: NAME)")
	return cmd
}

func newTenantsListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the tenants you can see: all of them from the platform tenant",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tenants.ListTenants(cmd.Context(), connect.NewRequest(&apiv1.ListTenantsRequest{}))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tDISPLAY NAME\tPLATFORM\tCREATED")
				for _, t := range res.Msg.GetTenants() {
					fmt.Fprintf(w, "%s\t%s\t%t\t%s\n", t.GetName(), orDash(t.GetDisplayName()), t.GetPlatform(), formatTime(t.GetCreateTime(), "-"))
				}
			})
		},
	}
}

func newTenantsGetCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "get NAME",
		Short:             "Show a tenant",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeTenants(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tenants.GetTenant(cmd.Context(), connect.NewRequest(&apiv1.GetTenantRequest{Name: args[0]}))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), tenantTable(res.Msg.GetTenant()))
		},
	}
}

func newTenantsUpdateCommand(g *globals) *cobra.Command {
	var displayName string
	cmd := &cobra.Command{
		Use:               "update NAME --display-name S",
		Short:             "Change a tenant's display name",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeTenants(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The name never changes (policies refer to it), so the display
			// name is all there is to update.
			if !cmd.Flags().Changed("display-name") {
				return usageErrorf("nothing to update: pass --display-name")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tenants.UpdateTenant(cmd.Context(), connect.NewRequest(&apiv1.UpdateTenantRequest{Name: args[0], DisplayName: &displayName}))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), tenantTable(res.Msg.GetTenant()))
		},
	}
	cmd.Flags().StringVar(&displayName, "display-name", "", "the new display name")
	return cmd
}

func newTenantsDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a tenant and everything in it",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeTenants(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tenants.DeleteTenant(cmd.Context(), connect.NewRequest(&apiv1.DeleteTenantRequest{Name: args[0]}))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintf(w, "deleted tenant %s\n", args[0])
			})
		},
	}
}

// tenantTable lays one tenant out as field and value.
func tenantTable(t *apiv1.Tenant) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "name\t%s\n", t.GetName())
		fmt.Fprintf(w, "display name\t%s\n", orDash(t.GetDisplayName()))
		fmt.Fprintf(w, "platform\t%t\n", t.GetPlatform())
		fmt.Fprintf(w, "created\t%s\n", formatTime(t.GetCreateTime(), "-"))
		fmt.Fprintf(w, "updated\t%s\n", formatTime(t.GetUpdateTime(), "-"))
	}
}
