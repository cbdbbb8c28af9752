package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// maxEventsPage is the most events one page holds (ListEventsRequest.page_size).
const maxEventsPage = 1000

func newEventsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List and watch events: nodes, reservations, policies and usage as they change",
		Long: "Every state change that matters is recorded as an event in the same transaction\n" +
			"as the change, numbered in commit order (seq): node.joined, node.ready,\n" +
			"node.unreachable, node.revoked, reservation.placed, reservation.bound,\n" +
			"reservation.released, reservation.expired, policy.changed, usage.closed.\n" +
			"You see the events of the kinds you may list. `list` reads a page; `watch`\n" +
			"follows them live and resumes after a dropped connection without a gap.",
	}
	cmd.AddCommand(newEventsListCommand(g), newEventsWatchCommand(g))
	return cmd
}

// eventFilters are the flags list and watch share.
type eventFilters struct {
	tenant     string
	allTenants bool
	types      []string
}

func (e *eventFilters) add(g *globals, cmd *cobra.Command) {
	addTenantFlag(g, cmd, &e.tenant)
	cmd.Flags().BoolVar(&e.allTenants, "all-tenants", false, "every tenant's events (platform only)")
	cmd.Flags().StringSliceVar(&e.types, "types", nil, "only these types: reservation.* (a kind), reservation.bound (a type) or *; repeat or separate with commas")
}

func (e *eventFilters) check() error {
	if e.tenant != "" && e.allTenants {
		return usageErrorf("--tenant and --all-tenants exclude each other: pass one of them")
	}
	return nil
}

func newEventsListCommand(g *globals) *cobra.Command {
	var filters eventFilters
	var after int64
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List events, oldest first",
		Long: "list prints one page of events after --after (a seq), oldest first; when the page\n" +
			"is full it ends with the --after to pass for the next one.",
		Example: "  better-compute events list\n" +
			"  better-compute events list --types 'reservation.*' --after 120\n" +
			"  better-compute events list --all-tenants --types node.unreachable",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := filters.check(); err != nil {
				return err
			}
			if after < 0 {
				return usageErrorf("--after %d is negative: give 0, or the seq of the last event you saw", after)
			}
			if limit < 0 || limit > maxEventsPage {
				return usageErrorf("--limit %d is out of range: give 1 to %d (0 for the server's default)", limit, maxEventsPage)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Events.ListEvents(cmd.Context(), connect.NewRequest(&apiv1.ListEventsRequest{
				Tenant: filters.tenant, AllTenants: filters.allTenants, Types: filters.types,
				AfterSeq: after, PageSize: int32(limit),
			}))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				if res.Msg.GetResync() {
					fmt.Fprintf(w, "events after %d were pruned: these start later\n\n", after)
				}
				fmt.Fprintln(w, "SEQ\tTIME\tTYPE\tTENANT\tSUBJECT\tDETAILS")
				for _, e := range res.Msg.GetEvents() {
					fmt.Fprintln(w, eventRow(e))
				}
				size := limit
				if size == 0 {
					size = 100
				}
				if len(res.Msg.GetEvents()) == size {
					fmt.Fprintf(w, "\nmore events: repeat the command with --after %d\n", res.Msg.GetNextAfterSeq())
				}
			})
		},
	}
	filters.add(g, cmd)
	cmd.Flags().Int64Var(&after, "after", 0, "only events after this seq")
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("at most this many events, up to %d (default: the server's, 100)", maxEventsPage))
	return cmd
}

func newEventsWatchCommand(g *globals) *cobra.Command {
	var filters eventFilters
	var after int64
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow events live until interrupted",
		Long: "watch prints each event as it happens, one per line (with -o json, one JSON\n" +
			"object per line). It starts at the newest event, or after --after (a seq) to\n" +
			"catch up first. A dropped connection is reopened from the last event seen.\n" +
			"If the server says events were missed (pruned, or the watch fell far behind),\n" +
			"watch stops with an error: list what you need, then watch again.",
		Example: "  better-compute events watch\n" +
			"  better-compute events watch --types 'reservation.*' -o json\n" +
			"  better-compute events watch --after 120",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := filters.check(); err != nil {
				return err
			}
			if cmd.Flags().Changed("after") && after < 0 {
				return usageErrorf("--after %d is negative: give 0, or the seq of the last event you saw", after)
			}
			if !cmd.Flags().Changed("after") {
				after = -1
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			err = c.WatchEvents(cmd.Context(), client.WatchOptions{
				After: after, Tenant: filters.tenant, AllTenants: filters.allTenants, Types: filters.types,
			}, func(e *apiv1.Event) error {
				if g.output == formatTable {
					_, err := fmt.Fprintln(out, strings.ReplaceAll(eventRow(e), "\t", "  "))
					return err
				}
				b, err := protojson.Marshal(e)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "%s\n", b)
				return err
			})
			switch {
			case errors.Is(err, cmd.Context().Err()) && cmd.Context().Err() != nil:
				return nil // interrupted: the normal way to stop
			case errors.Is(err, client.ErrResync):
				return fmt.Errorf("%w (list events or objects to catch up)", err)
			}
			return err
		},
	}
	filters.add(g, cmd)
	cmd.Flags().Int64Var(&after, "after", 0, "catch up on the events after this seq first (default: only new events)")
	return cmd
}

// eventRow is an event as a table row.
func eventRow(e *apiv1.Event) string {
	var details []string
	for _, k := range slices.Sorted(maps.Keys(e.GetData())) {
		details = append(details, k+"="+e.GetData()[k])
	}
	return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s", e.GetSeq(), formatTime(e.GetCreateTime(), "-"), e.GetType(),
		e.GetTenant(), e.GetSubject(), orDash(strings.Join(details, " ")))
}
