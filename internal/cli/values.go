package cli

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// This file holds what the API group commands share: argument checks, the
// --tenant flag, and the parsing and printing of durations and times.

// exactArgs is cobra.ExactArgs with the fix added to its complaint: cobra says
// only "accepts 1 arg(s), received 0", which does not tell what the argument
// is.
func exactArgs(n int) cobra.PositionalArgs { return withUsage(cobra.ExactArgs(n)) }

// minArgs is cobra.MinimumNArgs with exactArgs' usage line.
func minArgs(n int) cobra.PositionalArgs { return withUsage(cobra.MinimumNArgs(n)) }

// withUsage makes check's error a usage error that shows the command's
// usage line.
func withUsage(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			// The error line already starts with the program's name.
			path := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
			return usageErrorf("%s %v; usage: %s", path, err, cmd.UseLine())
		}
		return nil
	}
}

// addTenantFlag adds --tenant to a command that acts inside one tenant. Empty
// means the caller's own tenant, which the server resolves from the token.
func addTenantFlag(g *globals, cmd *cobra.Command, tenant *string) {
	cmd.Flags().StringVar(tenant, "tenant", "", "the tenant (default: your own)")
	_ = cmd.RegisterFlagCompletionFunc("tenant", completeTenants(g))
}

// completeTenants offers the tenants the caller can see. Completion must never
// print an error into the shell, so any failure offers nothing.
func completeTenants(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, _ string) ([]string, error) {
		res, err := c.Tenants.ListTenants(ctx, connect.NewRequest(&apiv1.ListTenantsRequest{}))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, t := range res.Msg.GetTenants() {
			names = append(names, t.GetName())
		}
		return names, nil
	})
}

// completeFrom turns a lister into a completion function. The lister gets the
// command's --tenant, if it has one, so that names come from the right tenant.
func completeFrom(g *globals, list func(ctx context.Context, c *client.Client, tenant string) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		tenant, _ := cmd.Flags().GetString("tenant") // "" when the command has no --tenant
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		names, err := list(ctx, c, tenant)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// firstArg limits a completion to the command's first argument: the others
// (a file, a member) are not of the same kind.
func firstArg(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		return f(cmd, args, toComplete)
	}
}

// parseDuration reads a Go duration that may also count whole days, which Go
// does not: "90d", "12h", "1d12h". Negative durations are refused; every use
// here (a lifetime, a time ago) is positive.
func parseDuration(s string) (time.Duration, error) {
	var days time.Duration
	rest := s
	// Go's duration units contain no 'd', so a 'd' can only be days.
	if before, after, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.ParseUint(before, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration", s)
		}
		days, rest = time.Duration(n)*24*time.Hour, after
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil || d < 0 {
			return 0, fmt.Errorf("%q is not a duration", s)
		}
	}
	if d > math.MaxInt64-days {
		return 0, fmt.Errorf("%q is too long: at most %.0f days", s, (time.Duration(math.MaxInt64)).Hours()/24)
	}
	return days + d, nil
}

// parseTime reads an absolute RFC 3339 time or a duration meaning that long
// before now ("1h", "7d").
func parseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return now.Add(-d), nil
}

// formatTime prints a timestamp for tables, or none when it is unset.
func formatTime(ts *timestamppb.Timestamp, none string) string {
	if ts == nil {
		return none
	}
	return ts.AsTime().Format(time.RFC3339)
}

// orDash keeps an empty cell visible, so that columns stay aligned for the eye.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// joinCell prints names as one comma-separated cell.
func joinCell(names []string) string {
	return orDash(strings.Join(names, ","))
}
