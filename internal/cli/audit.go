package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// maxAuditPage is the most events one page holds (ListAuditEventsRequest.page_size).
const maxAuditPage = 1000

func newAuditCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the audit log of changes and denials",
		Long: "Every call that changes something, and every call that is denied, leaves an\n" +
			"audit event, written in the same transaction as the change.",
	}
	cmd.AddCommand(newAuditListCommand(g))
	return cmd
}

func newAuditListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListAuditEventsRequest{}
	var since, until string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List audit events, newest first",
		Long: "list prints one page of events, newest first; when there are more, it ends\n" +
			"with the --page-token to pass for the next page. --principal and --resource\n" +
			"take Cedar entities, such as 'User::\"acme/alice\"'. --since and --until take\n" +
			"an RFC 3339 time or a duration meaning that long ago (90m, 12h, 7d).",
		Example: "  better-compute audit list --tenant acme --since 1h\n" +
			"  better-compute audit list --all-tenants --action compute:tokens:create --limit 20\n" +
			"  better-compute audit list --principal 'ServiceAccount::\"acme/ci\"'",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Tenant != "" && req.AllTenants {
				return usageErrorf("--tenant and --all-tenants exclude each other: pass one of them")
			}
			if limit < 0 || limit > maxAuditPage {
				return usageErrorf("--limit %d is out of range: give 1 to %d (0 for the server's default), and --page-token for further pages", limit, maxAuditPage)
			}
			req.PageSize = int32(limit)
			now := time.Now()
			if since != "" {
				t, err := parseTime(since, now)
				if err != nil {
					return usageErrorf("--since %v: use an RFC 3339 time (2025-01-02T15:04:05Z) or how long ago (1h, 7d)", err)
				}
				req.StartTime = timestamppb.New(t)
			}
			if until != "" {
				t, err := parseTime(until, now)
				if err != nil {
					return usageErrorf("--until %v: use an RFC 3339 time (2025-01-02T15:04:05Z) or how long ago (1h, 7d)", err)
				}
				req.EndTime = timestamppb.New(t)
			}
			if req.StartTime != nil && req.EndTime != nil && !req.EndTime.AsTime().After(req.StartTime.AsTime()) {
				return usageErrorf("--until %s is not after --since %s: no event can match; swap them or widen the window", until, since)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Audit.ListAuditEvents(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "TIME\tPRINCIPAL\tACTION\tRESOURCE\tDECISION\tREASON\tREQUEST")
				for _, e := range res.Msg.GetEvents() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", formatTime(e.GetTime(), "-"), orDash(e.GetPrincipal()),
						e.GetAction(), orDash(e.GetResource()), e.GetDecision(), orDash(cell(e.GetReason())), orDash(e.GetRequestId()))
				}
				if next := res.Msg.GetNextPageToken(); next != "" {
					fmt.Fprintf(w, "\nmore events: repeat the command with --page-token %s\n", shellQuote(next))
				}
			})
		},
	}
	f := cmd.Flags()
	addTenantFlag(g, cmd, &req.Tenant)
	f.BoolVar(&req.AllTenants, "all-tenants", false, "every tenant's events and those with no tenant (platform only)")
	f.StringVar(&req.Principal, "principal", "", `only events by this principal entity, such as 'User::"acme/alice"'`)
	f.StringVar(&req.Action, "action", "", "only events of this action, such as compute:users:create")
	f.StringVar(&req.Resource, "resource", "", `only events about this resource entity, such as 'Tenant::"acme"'`)
	f.StringVar(&since, "since", "", "only events at or after this time: RFC 3339, or how long ago (1h, 7d)")
	f.StringVar(&until, "until", "", "only events before this time: RFC 3339, or how long ago (1h, 7d)")
	f.IntVar(&limit, "limit", 0, fmt.Sprintf("at most this many events, up to %d (default: the server's, 100)", maxAuditPage))
	f.StringVar(&req.PageToken, "page-token", "", "continue where the previous page ended")
	_ = cmd.RegisterFlagCompletionFunc("action", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return apiActions(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// apiActions lists the Cedar actions the API's methods declare, read from the
// compiled-in descriptors as the server does, so completion knows every action
// without a list to keep in step.
func apiActions() []string {
	seen := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage(apiv1.File_bettercompute_api_v1_audit_proto.Package(), func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			ms := fd.Services().Get(i).Methods()
			for j := range ms.Len() {
				opts := ms.Get(j).Options()
				if opts == nil || !proto.HasExtension(opts, apiv1.E_Authorization) {
					continue
				}
				if a, _ := proto.GetExtension(opts, apiv1.E_Authorization).(*apiv1.Authorization); a.GetAction() != "" {
					seen[a.GetAction()] = true
				}
			}
		}
		return true
	})
	actions := make([]string, 0, len(seen))
	for a := range seen {
		actions = append(actions, a)
	}
	sort.Strings(actions)
	return actions
}

// cell keeps free text on one table line.
func cell(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// shellQuote quotes s for a POSIX shell unless it needs none, so that the
// printed flag can be pasted as is.
func shellQuote(s string) string {
	safe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=.:/+", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !safe(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
