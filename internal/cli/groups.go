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

func newGroupsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "Manage groups, the sets of principals that policies grant to",
		Long: "A group is a set of users and service accounts of one tenant, named in\n" +
			"policies as Group::\"TENANT/NAME\": `principal in Group::\"acme/admins\"`.",
	}
	cmd.AddCommand(
		newGroupsCreateCommand(g),
		newGroupsListCommand(g),
		newGroupsGetCommand(g),
		newGroupsUpdateCommand(g),
		newGroupsDeleteCommand(g),
		newGroupsMemberCommand(g, "add-member", "Add a user or service account of the same tenant to a group"),
		newGroupsMemberCommand(g, "remove-member", "Remove a member from a group; the member itself stays"),
	)
	return cmd
}

func newGroupsCreateCommand(g *globals) *cobra.Command {
	req := &apiv1.CreateGroupRequest{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Add a group to a tenant",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Groups.CreateGroup(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), groupTable(res.Msg.GetGroup()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Description, "description", "", "what the group is for")
	return cmd
}

func newGroupsListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListGroupsRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's groups",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Groups.ListGroups(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tDESCRIPTION\tMEMBERS\tCREATED")
				for _, gr := range res.Msg.GetGroups() {
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", gr.GetName(), orDash(gr.GetDescription()), len(gr.GetMembers()), formatTime(gr.GetCreateTime(), "-"))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newGroupsGetCommand(g *globals) *cobra.Command {
	req := &apiv1.GetGroupRequest{}
	cmd := &cobra.Command{
		Use:               "get NAME",
		Short:             "Show a group and its members",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeGroups(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Groups.GetGroup(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), groupTable(res.Msg.GetGroup()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newGroupsUpdateCommand(g *globals) *cobra.Command {
	req := &apiv1.UpdateGroupRequest{}
	var description string
	cmd := &cobra.Command{
		Use:               "update NAME --description S",
		Short:             "Change a group's description",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeGroups(g)),
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
			res, err := c.Groups.UpdateGroup(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), groupTable(res.Msg.GetGroup()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&description, "description", "", "the new description")
	return cmd
}

func newGroupsDeleteCommand(g *globals) *cobra.Command {
	req := &apiv1.DeleteGroupRequest{}
	cmd := &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a group; its members stay",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeGroups(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Groups.DeleteGroup(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintf(w, "deleted group %s\n", args[0])
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// newGroupsMemberCommand builds add-member and remove-member, which differ
// only in the call they make.
func newGroupsMemberCommand(g *globals, use, short string) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   use + " GROUP MEMBER",
		Short: short,
		Args:  exactArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return completeGroups(g)(cmd, args, toComplete)
			}
			if len(args) == 1 {
				return completePrincipals(g)(cmd, args, toComplete)
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if use == "add-member" {
				res, err := c.Groups.AddGroupMember(cmd.Context(), connect.NewRequest(&apiv1.AddGroupMemberRequest{Tenant: tenant, Group: args[0], Member: args[1]}))
				if err != nil {
					return callError(c, err)
				}
				return g.printer(cmd).print(docOf(res.Msg), groupTable(res.Msg.GetGroup()))
			}
			res, err := c.Groups.RemoveGroupMember(cmd.Context(), connect.NewRequest(&apiv1.RemoveGroupMemberRequest{Tenant: tenant, Group: args[0], Member: args[1]}))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), groupTable(res.Msg.GetGroup()))
		},
	}
	addTenantFlag(g, cmd, &tenant)
	return cmd
}

// groupTable lays one group out as field and value, then its members one a
// line, so that a long member list stays readable.
func groupTable(gr *apiv1.Group) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "tenant\t%s\n", gr.GetTenant())
		fmt.Fprintf(w, "name\t%s\n", gr.GetName())
		fmt.Fprintf(w, "description\t%s\n", orDash(gr.GetDescription()))
		fmt.Fprintf(w, "created\t%s\n", formatTime(gr.GetCreateTime(), "-"))
		fmt.Fprintf(w, "updated\t%s\n", formatTime(gr.GetUpdateTime(), "-"))
		if len(gr.GetMembers()) == 0 {
			fmt.Fprintf(w, "members\t-\n")
			return
		}
		for i, m := range gr.GetMembers() {
			label := ""
			if i == 0 {
				label = "members"
			}
			fmt.Fprintf(w, "%s\t%s\n", label, m)
		}
	}
}

func completeGroups(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
		res, err := c.Groups.ListGroups(ctx, connect.NewRequest(&apiv1.ListGroupsRequest{Tenant: tenant}))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, gr := range res.Msg.GetGroups() {
			names = append(names, gr.GetName())
		}
		return names, nil
	})
}

// completePrincipals offers a tenant's users and service accounts, which share
// one namespace and can both be group members and token holders.
func completePrincipals(g *globals) cobra.CompletionFunc {
	users, accounts := completeUsers(g), completeServiceAccounts(g)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		u, _ := users(cmd, args, toComplete)
		a, _ := accounts(cmd, args, toComplete)
		return append(u, a...), cobra.ShellCompDirectiveNoFileComp
	}
}
