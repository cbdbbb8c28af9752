package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// maxDeliveryPage is the most attempts one page holds
// (ListWebhookDeliveriesRequest.page_size).
const maxDeliveryPage = 1000

func newWebhooksCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "Deliver a tenant's events to HTTP endpoints",
		Long: "A webhook POSTs each of the tenant's events that match its patterns to a URL,\n" +
			"in order, signed as the Standard Webhooks specification says with a secret\n" +
			"shown once, at creation. A receiver that is down is retried with backoff and\n" +
			"loses nothing; one that stays down a day makes the webhook failing until\n" +
			"`webhooks enable`. `webhooks rotate-secret` replaces the secret, keeping the\n" +
			"old one valid for a while. See docs/webhooks.md for the payload and how to\n" +
			"verify it.",
	}
	cmd.AddCommand(
		newWebhooksCreateCommand(g),
		newWebhooksListCommand(g),
		newWebhooksGetCommand(g),
		newWebhooksDeleteCommand(g),
		newWebhooksEnableCommand(g),
		newWebhooksRotateSecretCommand(g),
		newWebhooksTestCommand(g),
		newWebhooksDeliveriesCommand(g),
	)
	return cmd
}

func newWebhooksCreateCommand(g *globals) *cobra.Command {
	req := &apiv1.CreateWebhookRequest{}
	var events string
	cmd := &cobra.Command{
		Use:   "create --url URL --events PATTERNS",
		Short: "Register an endpoint and print its signing secret once",
		Example: "  better-compute webhooks create --url https://hooks.example.com/bc --events 'reservation.*'\n" +
			"  better-compute webhooks create --tenant acme --url https://hooks.example.com/bc --events 'node.ready,node.unreachable'",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Url == "" {
				return usageErrorf("webhooks create needs --url: the http or https endpoint to POST events to")
			}
			for p := range strings.SplitSeq(events, ",") {
				if p = strings.TrimSpace(p); p != "" {
					req.Events = append(req.Events, p)
				}
			}
			if len(req.Events) == 0 {
				return usageErrorf("webhooks create needs --events: '*', a kind such as 'reservation.*', or types such as 'node.ready,node.unreachable'")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Webhooks.CreateWebhook(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				webhookTable(res.Msg.GetWebhook())(w)
				fmt.Fprintln(w)
				fmt.Fprintln(w, "The signing secret follows. It is shown only this once: give it to the receiver now.")
				fmt.Fprintln(w, res.Msg.GetSecret())
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Url, "url", "", "the http or https endpoint to POST events to (required)")
	cmd.Flags().StringVar(&events, "events", "", "comma-separated patterns: '*', KIND.* or KIND.NAME, KIND one of node, reservation, policy, usage (required)")
	_ = cmd.RegisterFlagCompletionFunc("events", cobra.FixedCompletions([]string{"*", "node.*", "reservation.*", "policy.*", "usage.*"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newWebhooksListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListWebhooksRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's webhooks",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Webhooks.ListWebhooks(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "ID\tURL\tEVENTS\tSTATE\tCURSOR\tFAILED ATTEMPTS\tNEXT ATTEMPT")
				for _, h := range res.Msg.GetWebhooks() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", h.GetId(), h.GetUrl(), joinCell(h.GetEvents()), h.GetState(),
						h.GetCursor(), h.GetAttempts(), formatTime(h.GetNextAttemptTime(), "-"))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// webhookIDCommand is a command that names one webhook and prints what the
// call returns; get, delete, enable and test are all of this shape.
func webhookIDCommand(g *globals, use, short string, call func(cmd *cobra.Command, tenant, id string) error) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, tenant, args[0])
		},
	}
	addTenantFlag(g, cmd, &tenant)
	return cmd
}

func newWebhooksGetCommand(g *globals) *cobra.Command {
	return webhookIDCommand(g, "get", "Show a webhook (never its secret)", func(cmd *cobra.Command, tenant, id string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		res, err := c.Webhooks.GetWebhook(cmd.Context(), connect.NewRequest(&apiv1.GetWebhookRequest{Tenant: tenant, Id: id}))
		if err != nil {
			return callError(c, err)
		}
		return g.printer(cmd).print(docOf(res.Msg), webhookTable(res.Msg.GetWebhook()))
	})
}

func newWebhooksDeleteCommand(g *globals) *cobra.Command {
	return webhookIDCommand(g, "delete", "Stop deliveries and delete a webhook and its log", func(cmd *cobra.Command, tenant, id string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		res, err := c.Webhooks.DeleteWebhook(cmd.Context(), connect.NewRequest(&apiv1.DeleteWebhookRequest{Tenant: tenant, Id: id}))
		if err != nil {
			return callError(c, err)
		}
		return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) { fmt.Fprintf(w, "webhook %s deleted\n", id) })
	})
}

func newWebhooksEnableCommand(g *globals) *cobra.Command {
	return webhookIDCommand(g, "enable", "Resume a failing webhook from where it stopped", func(cmd *cobra.Command, tenant, id string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		res, err := c.Webhooks.EnableWebhook(cmd.Context(), connect.NewRequest(&apiv1.EnableWebhookRequest{Tenant: tenant, Id: id}))
		if err != nil {
			return callError(c, err)
		}
		return g.printer(cmd).print(docOf(res.Msg), webhookTable(res.Msg.GetWebhook()))
	})
}

// maxKeepPrevious is the longest --keep-previous the server takes
// (RotateWebhookSecretRequest.keep_previous).
const maxKeepPrevious = 7 * 24 * time.Hour

func newWebhooksRotateSecretCommand(g *globals) *cobra.Command {
	req := &apiv1.RotateWebhookSecretRequest{}
	var keep string
	cmd := &cobra.Command{
		Use:   "rotate-secret ID [--keep-previous DURATION]",
		Short: "Replace a webhook's signing secret and print the new one once; the old one stays valid a while",
		Long: "Replaces the signing secret. Until --keep-previous has passed, every delivery\n" +
			"carries two signatures, one per secret, so receivers verifying with either\n" +
			"accept it: roll the new secret out to them meanwhile. --keep-previous 0 drops\n" +
			"the old secret at once, for one that leaked. The cursor and the delivery log\n" +
			"stay as they are.",
		Example: "  better-compute webhooks rotate-secret wh_0123456789abcdef\n" +
			"  better-compute webhooks rotate-secret wh_0123456789abcdef --keep-previous 3d\n" +
			"  better-compute webhooks rotate-secret wh_0123456789abcdef --keep-previous 0",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Unset, the flag sends nothing and the server's default
			// applies: the default is kept in one place.
			if cmd.Flags().Changed("keep-previous") {
				d, err := parseDuration(keep)
				if strings.HasPrefix(keep, "-") || d > maxKeepPrevious {
					return usageErrorf("--keep-previous %s is out of range: give 0 (drop the old secret now) to 7d", keep)
				}
				if err != nil {
					return usageErrorf("--keep-previous %v: use a number of days (3d) or a Go duration (12h, 30m)", err)
				}
				req.KeepPrevious = durationpb.New(d)
			}
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Webhooks.RotateWebhookSecret(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			h := res.Msg.GetWebhook()
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				webhookTable(h)(w)
				fmt.Fprintln(w)
				if until := h.GetPreviousSecretExpireTime(); until != nil {
					fmt.Fprintf(w, "The old secret keeps signing deliveries until %s: give the receivers the new one before then.\n", formatTime(until, "-"))
				} else {
					fmt.Fprintln(w, "The old secret no longer signs deliveries.")
				}
				fmt.Fprintln(w, "The new signing secret follows. It is shown only this once: save it now.")
				fmt.Fprintln(w, res.Msg.GetSecret())
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&keep, "keep-previous", "", "how long the old secret stays valid beside the new one: 0 (drop it now) to 7d (default: the server's, 24h)")
	return cmd
}

func newWebhooksTestCommand(g *globals) *cobra.Command {
	return webhookIDCommand(g, "test", "Send a webhook.test event now and show the receiver's answer", func(cmd *cobra.Command, tenant, id string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		res, err := c.Webhooks.TestWebhook(cmd.Context(), connect.NewRequest(&apiv1.TestWebhookRequest{Tenant: tenant, Id: id}))
		if err != nil {
			return callError(c, err)
		}
		d := res.Msg.GetDelivery()
		return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
			fmt.Fprintf(w, "delivered\t%t\n", d.GetDelivered())
			fmt.Fprintf(w, "status\t%s\n", statusCell(d))
			fmt.Fprintf(w, "error\t%s\n", orDash(d.GetError()))
			fmt.Fprintf(w, "duration\t%s\n", d.GetDuration().AsDuration())
		})
	})
}

func newWebhooksDeliveriesCommand(g *globals) *cobra.Command {
	req := &apiv1.ListWebhookDeliveriesRequest{}
	var limit int
	cmd := &cobra.Command{
		Use:   "deliveries ID",
		Short: "List a webhook's delivery attempts, newest first",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 || limit > maxDeliveryPage {
				return usageErrorf("--limit %d is out of range: give 1 to %d (0 for the server's default), and --page-token for further pages", limit, maxDeliveryPage)
			}
			req.Id, req.PageSize = args[0], int32(limit)
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Webhooks.ListWebhookDeliveries(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "TIME\tSEQ\tTYPE\tATTEMPT\tSTATUS\tDURATION\tERROR")
				for _, d := range res.Msg.GetDeliveries() {
					fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", formatTime(d.GetCreateTime(), "-"), d.GetEventSeq(), d.GetEventType(),
						d.GetAttempt(), statusCell(d), d.GetDuration().AsDuration(), orDash(d.GetError()))
				}
				if next := res.Msg.GetNextPageToken(); next != "" {
					fmt.Fprintf(w, "\nmore attempts: repeat the command with --page-token %s\n", shellQuote(next))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("at most this many attempts, up to %d (default: the server's, 100)", maxDeliveryPage))
	cmd.Flags().StringVar(&req.PageToken, "page-token", "", "continue where the previous page ended")
	return cmd
}

// statusCell is an attempt's HTTP status, or "-" when none came back.
func statusCell(d *apiv1.WebhookDelivery) string {
	if d.GetHttpStatus() == 0 {
		return "-"
	}
	return fmt.Sprint(d.GetHttpStatus())
}

func webhookTable(h *apiv1.Webhook) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "id\t%s\n", h.GetId())
		fmt.Fprintf(w, "tenant\t%s\n", h.GetTenant())
		fmt.Fprintf(w, "url\t%s\n", h.GetUrl())
		fmt.Fprintf(w, "events\t%s\n", joinCell(h.GetEvents()))
		fmt.Fprintf(w, "state\t%s\n", h.GetState())
		fmt.Fprintf(w, "cursor\t%d\n", h.GetCursor())
		fmt.Fprintf(w, "failed attempts\t%d\n", h.GetAttempts())
		fmt.Fprintf(w, "failing since\t%s\n", formatTime(h.GetFailingSince(), "-"))
		fmt.Fprintf(w, "next attempt\t%s\n", formatTime(h.GetNextAttemptTime(), "-"))
		fmt.Fprintf(w, "created\t%s\n", formatTime(h.GetCreateTime(), "-"))
		fmt.Fprintf(w, "previous secret\t%s\n", previousSecretCell(h, time.Now()))
	}
}

// previousSecretCell says until when a rotated secret still signs: never
// the secret, only its expiry, or "-" when there is none.
func previousSecretCell(h *apiv1.Webhook, now time.Time) string {
	until := h.GetPreviousSecretExpireTime()
	switch {
	case until == nil:
		return "-"
	case until.AsTime().After(now):
		return "valid until " + formatTime(until, "-")
	default:
		return "expired " + formatTime(until, "-")
	}
}
