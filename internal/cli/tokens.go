package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// The lifetimes the API accepts (CreateTokenRequest.ttl). Checking them here
// turns a typo such as --ttl 90 into a usage error before anything is sent.
const (
	minTokenTTL = time.Minute
	maxTokenTTL = 366 * 24 * time.Hour
)

func newTokensCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Create, list and revoke API tokens",
		Long: "An API token acts as one user or service account until it expires or is\n" +
			"revoked. Its secret is shown once, when it is created, and stored only as a\n" +
			"hash. Use it as BETTER_COMPUTE_TOKEN or as a context's token.",
	}
	cmd.AddCommand(
		newTokensCreateCommand(g),
		newTokensListCommand(g),
		newTokensGetCommand(g),
		newTokensRevokeCommand(g),
	)
	return cmd
}

func newTokensCreateCommand(g *globals) *cobra.Command {
	req := &apiv1.CreateTokenRequest{}
	var ttl string
	cmd := &cobra.Command{
		Use:   "create --principal NAME --ttl DURATION",
		Short: "Make a token for a user or service account and print its secret once",
		Example: "  better-compute tokens create --tenant acme --principal ci --ttl 90d --description \"nightly builds\"\n" +
			"  better-compute tokens create --principal alice --ttl 12h",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Principal == "" {
				return usageErrorf("tokens create needs --principal: the user or service account the token acts as")
			}
			if ttl == "" {
				return usageErrorf("tokens create needs --ttl: how long the token lives, such as 90d or 12h")
			}
			d, err := parseDuration(ttl)
			if err != nil {
				return usageErrorf("--ttl %v: use a number of days (90d) or a Go duration (12h, 30m)", err)
			}
			if d < minTokenTTL || d > maxTokenTTL {
				return usageErrorf("--ttl %s is out of range: a token lives at least 1m and at most 366d", ttl)
			}
			req.Ttl = durationpb.New(d)
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tokens.CreateToken(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				tokenTable(res.Msg.GetToken())(w)
				fmt.Fprintln(w)
				fmt.Fprintln(w, "The token's secret follows. It is shown only this once and cannot be retrieved later: save it now.")
				fmt.Fprintln(w, res.Msg.GetSecret())
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Principal, "principal", "", "the user or service account the token acts as (required)")
	cmd.Flags().StringVar(&ttl, "ttl", "", "how long the token lives, 1m to 366d: a number of days (90d) or a Go duration (12h) (required)")
	cmd.Flags().StringVar(&req.Description, "description", "", "what the token is for")
	_ = cmd.RegisterFlagCompletionFunc("principal", completePrincipals(g))
	_ = cmd.RegisterFlagCompletionFunc("ttl", cobra.FixedCompletions([]string{"1h", "12h", "7d", "30d", "90d", "365d"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newTokensListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListTokensRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's tokens, newest first",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tokens.ListTokens(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			now := time.Now()
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "ID\tPRINCIPAL\tDESCRIPTION\tEXPIRES\tLAST USED\tREVOKED")
				for _, t := range res.Msg.GetTokens() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.GetId(), t.GetPrincipal(), orDash(t.GetDescription()),
						expiry(t, now), formatTime(t.GetLastUseTime(), "never"), formatTime(t.GetRevokeTime(), "no"))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Principal, "principal", "", "only this user's or service account's tokens")
	_ = cmd.RegisterFlagCompletionFunc("principal", completePrincipals(g))
	return cmd
}

func newTokensGetCommand(g *globals) *cobra.Command {
	req := &apiv1.GetTokenRequest{}
	cmd := &cobra.Command{
		Use:               "get ID",
		Short:             "Show a token's record (never its secret)",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeTokens(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tokens.GetToken(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), tokenTable(res.Msg.GetToken()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newTokensRevokeCommand(g *globals) *cobra.Command {
	req := &apiv1.RevokeTokenRequest{}
	cmd := &cobra.Command{
		Use:               "revoke ID",
		Short:             "Stop a token from working, from its next call on",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeTokens(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Tokens.RevokeToken(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), tokenTable(res.Msg.GetToken()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// tokenTable lays one token's record out as field and value.
func tokenTable(t *apiv1.Token) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "id\t%s\n", t.GetId())
		fmt.Fprintf(w, "tenant\t%s\n", t.GetTenant())
		fmt.Fprintf(w, "principal\t%s\n", t.GetPrincipal())
		fmt.Fprintf(w, "description\t%s\n", orDash(t.GetDescription()))
		fmt.Fprintf(w, "created\t%s\n", formatTime(t.GetCreateTime(), "-"))
		fmt.Fprintf(w, "expires\t%s\n", expiry(t, time.Now()))
		fmt.Fprintf(w, "last used\t%s\n", formatTime(t.GetLastUseTime(), "never"))
		fmt.Fprintf(w, "revoked\t%s\n", formatTime(t.GetRevokeTime(), "no"))
	}
}

// expiry prints when a token expires and flags one that already has, which
// a bare timestamp leaves the reader to work out.
func expiry(t *apiv1.Token, now time.Time) string {
	s := formatTime(t.GetExpireTime(), "-")
	if t.GetExpireTime() != nil && !t.GetExpireTime().AsTime().After(now) {
		s += " (expired)"
	}
	return s
}

func completeTokens(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
		res, err := c.Tokens.ListTokens(ctx, connect.NewRequest(&apiv1.ListTokensRequest{Tenant: tenant}))
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, t := range res.Msg.GetTokens() {
			// "ID\tdescription" shows the principal beside the id in shells
			// that display completion descriptions.
			ids = append(ids, t.GetId()+"\t"+t.GetPrincipal())
		}
		return ids, nil
	})
}
