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

func newUsersCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "users",
		Short: "Manage the people in a tenant",
		Long: "A user is a person in a tenant, named in policies as User::\"TENANT/NAME\".\n" +
			"Users and service accounts share one namespace per tenant.",
	}
	cmd.AddCommand(
		newUsersCreateCommand(g),
		newUsersListCommand(g),
		newUsersGetCommand(g),
		newUsersUpdateCommand(g),
		newUsersDeleteCommand(g),
	)
	return cmd
}

func newUsersCreateCommand(g *globals) *cobra.Command {
	req := &apiv1.CreateUserRequest{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Add a user to a tenant",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Users.CreateUser(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), userTable(res.Msg.GetUser()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.DisplayName, "display-name", "", "a human-friendly name")
	cmd.Flags().StringVar(&req.Email, "email", "", "the user's email address")
	return cmd
}

func newUsersListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListUsersRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's users",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Users.ListUsers(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tDISPLAY NAME\tEMAIL\tGROUPS\tCREATED")
				for _, u := range res.Msg.GetUsers() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", u.GetName(), orDash(u.GetDisplayName()), orDash(u.GetEmail()),
						joinCell(u.GetGroups()), formatTime(u.GetCreateTime(), "-"))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newUsersGetCommand(g *globals) *cobra.Command {
	req := &apiv1.GetUserRequest{}
	cmd := &cobra.Command{
		Use:               "get NAME",
		Short:             "Show a user and the groups it belongs to",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeUsers(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Users.GetUser(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), userTable(res.Msg.GetUser()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newUsersUpdateCommand(g *globals) *cobra.Command {
	req := &apiv1.UpdateUserRequest{}
	var displayName, email string
	cmd := &cobra.Command{
		Use:               "update NAME [--display-name S] [--email E]",
		Short:             "Change a user's display name or email; fields not given stay as they are",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeUsers(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			// Only the flags given are sent: an unset optional field tells the
			// server to leave it, so `--email ""` clears and no --email keeps.
			if cmd.Flags().Changed("display-name") {
				req.DisplayName = &displayName
			}
			if cmd.Flags().Changed("email") {
				req.Email = &email
			}
			if req.DisplayName == nil && req.Email == nil {
				return usageErrorf("nothing to update: pass --display-name, --email or both")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Users.UpdateUser(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), userTable(res.Msg.GetUser()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&displayName, "display-name", "", "the new display name")
	cmd.Flags().StringVar(&email, "email", "", "the new email address")
	return cmd
}

func newUsersDeleteCommand(g *globals) *cobra.Command {
	req := &apiv1.DeleteUserRequest{}
	cmd := &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a user with its group memberships and tokens",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeUsers(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Users.DeleteUser(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintf(w, "deleted user %s\n", args[0])
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// userTable lays one user out as field and value.
func userTable(u *apiv1.User) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "tenant\t%s\n", u.GetTenant())
		fmt.Fprintf(w, "name\t%s\n", u.GetName())
		fmt.Fprintf(w, "display name\t%s\n", orDash(u.GetDisplayName()))
		fmt.Fprintf(w, "email\t%s\n", orDash(u.GetEmail()))
		fmt.Fprintf(w, "groups\t%s\n", joinCell(u.GetGroups()))
		fmt.Fprintf(w, "created\t%s\n", formatTime(u.GetCreateTime(), "-"))
		fmt.Fprintf(w, "updated\t%s\n", formatTime(u.GetUpdateTime(), "-"))
	}
}

func completeUsers(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
		res, err := c.Users.ListUsers(ctx, connect.NewRequest(&apiv1.ListUsersRequest{Tenant: tenant}))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, u := range res.Msg.GetUsers() {
			names = append(names, u.GetName())
		}
		return names, nil
	})
}
