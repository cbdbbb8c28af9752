package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func newPoliciesCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policies",
		Short: "Manage a tenant's Cedar policies",
		Long: "A policy is a named Cedar document of permit and forbid statements. Calls are\n" +
			"denied unless a policy permits them. A tenant's policies govern its own\n" +
			"principals; the platform tenant's apply to every call. `policies schema`\n" +
			"prints the entities and actions policies may use.",
		Example: "  better-compute policies validate ops.cedar\n" +
			"  better-compute policies put ops --tenant acme ops.cedar\n" +
			"  better-compute policies get ops --tenant acme",
	}
	cmd.AddCommand(
		newPoliciesPutCommand(g),
		newPoliciesGetCommand(g),
		newPoliciesListCommand(g),
		newPoliciesDeleteCommand(g),
		newPoliciesValidateCommand(g),
		newPoliciesSchemaCommand(g),
	)
	return cmd
}

func newPoliciesPutCommand(g *globals) *cobra.Command {
	req := &apiv1.PutPolicyRequest{}
	cmd := &cobra.Command{
		Use:               "put NAME FILE",
		Short:             "Create or replace a policy from a Cedar file (- for stdin)",
		Long:              "put checks the document against the deployment's schema and stores it only if it is valid.\nRun `policies validate FILE` to see each problem with its line and column.",
		Args:              exactArgs(2),
		ValidArgsFunction: policyFileArg(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := readPolicyFile(cmd, args[1])
			if err != nil {
				return err
			}
			req.Name, req.Body = args[0], body
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Policies.PutPolicy(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			p := res.Msg.GetPolicy()
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintf(w, "tenant\t%s\n", p.GetTenant())
				fmt.Fprintf(w, "name\t%s\n", p.GetName())
				fmt.Fprintf(w, "created\t%s\n", formatTime(p.GetCreateTime(), "-"))
				fmt.Fprintf(w, "updated\t%s\n", formatTime(p.GetUpdateTime(), "-"))
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newPoliciesGetCommand(g *globals) *cobra.Command {
	req := &apiv1.GetPolicyRequest{}
	cmd := &cobra.Command{
		Use:               "get NAME",
		Short:             "Print a policy's Cedar source, as stored",
		Long:              "get prints the Cedar source unchanged in the table format, so that\n`policies get NAME > FILE` and `policies put NAME FILE` round-trip.",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completePolicies(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Policies.GetPolicy(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return printText(g.printer(cmd), docOf(res.Msg), res.Msg.GetPolicy().GetBody())
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newPoliciesListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListPoliciesRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's policies",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Policies.ListPolicies(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tCREATED\tUPDATED")
				for _, p := range res.Msg.GetPolicies() {
					fmt.Fprintf(w, "%s\t%s\t%s\n", p.GetName(), formatTime(p.GetCreateTime(), "-"), formatTime(p.GetUpdateTime(), "-"))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newPoliciesDeleteCommand(g *globals) *cobra.Command {
	req := &apiv1.DeletePolicyRequest{}
	cmd := &cobra.Command{
		Use:               "delete NAME",
		Short:             "Remove a policy",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completePolicies(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Policies.DeletePolicy(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintf(w, "deleted policy %s\n", args[0])
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newPoliciesValidateCommand(g *globals) *cobra.Command {
	req := &apiv1.ValidatePolicyRequest{}
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a Cedar file against the deployment's schema without storing it (- for stdin)",
		Long: "validate prints each problem as FILE:LINE:COLUMN: message, the form editors\n" +
			"jump to, and exits 1 when there is any.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := readPolicyFile(cmd, args[0])
			if err != nil {
				return err
			}
			req.Body = body
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Policies.ValidatePolicy(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			name := args[0]
			if name == "-" {
				name = "<stdin>"
			}
			problems := res.Msg.GetProblems()
			var text strings.Builder
			for _, pr := range problems {
				text.WriteString(problemLine(name, pr) + "\n")
			}
			if len(problems) == 0 {
				text.WriteString(name + ": valid\n")
			}
			if err := printText(g.printer(cmd), docOf(res.Msg), text.String()); err != nil {
				return err
			}
			switch len(problems) {
			case 0:
				return nil
			case 1:
				return errors.New("policy has 1 problem")
			default:
				return fmt.Errorf("policy has %d problems", len(problems))
			}
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newPoliciesSchemaCommand(g *globals) *cobra.Command {
	req := &apiv1.GetSchemaRequest{}
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Print the Cedar schema policies are validated against",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Policies.GetSchema(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return printText(g.printer(cmd), docOf(res.Msg), res.Msg.GetSchema())
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// problemLine is the compiler-style FILE:LINE:COLUMN: message, leaving out
// the line or column the server reports as 0 (unknown or the whole document).
func problemLine(file string, pr *apiv1.PolicyProblem) string {
	msg := strings.ReplaceAll(pr.GetMessage(), "\n", " ")
	switch {
	case pr.GetLine() <= 0:
		return fmt.Sprintf("%s: %s", file, msg)
	case pr.GetColumn() <= 0:
		return fmt.Sprintf("%s:%d: %s", file, pr.GetLine(), msg)
	default:
		return fmt.Sprintf("%s:%d:%d: %s", file, pr.GetLine(), pr.GetColumn(), msg)
	}
}

// readPolicyFile reads FILE, or standard input for "-". A file that cannot be
// read is a mistake in the command line, reported before any call.
func readPolicyFile(cmd *cobra.Command, file string) (string, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return "", usageErrorf("cannot read policy file %s: %v; give a readable Cedar file, or - for standard input", file, unwrapPath(err))
	}
	return string(data), nil
}

// unwrapPath drops the *PathError's own "open FILE:" prefix, which would
// repeat the file name.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// printText writes text unchanged in the table format, bypassing the table
// writer, which would realign the tabs in a Cedar document; json and yaml print
// doc as usual.
func printText(p printer, doc document, text string) error {
	if p.format != formatTable {
		return p.print(doc, nil)
	}
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	_, err := io.WriteString(p.w, text)
	return err
}

// policyFileArg completes a policy name first, then a file.
func policyFileArg(g *globals) cobra.CompletionFunc {
	names := completePolicies(g)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return names(cmd, args, toComplete)
		}
		if len(args) == 1 {
			return []string{"cedar"}, cobra.ShellCompDirectiveFilterFileExt
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

func completePolicies(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
		res, err := c.Policies.ListPolicies(ctx, connect.NewRequest(&apiv1.ListPoliciesRequest{Tenant: tenant}))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, p := range res.Msg.GetPolicies() {
			names = append(names, p.GetName())
		}
		return names, nil
	})
}
