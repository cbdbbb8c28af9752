package cli

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// maxUsagePage is the most windows one page holds (ListUsageRequest.page_size);
// export asks for full pages.
const maxUsagePage = 1000

// microsPerHour turns a window's quantity (GPU-microseconds) into GPU-hours.
const microsPerHour = float64(time.Hour / time.Microsecond)

func newUsageCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Read metered GPU usage (GPU-hours)",
		Long: "The meter cuts the time each reservation holds its GPUs into UTC clock hours\n" +
			"and writes one usage window per reservation, hour and GPU model once the hour\n" +
			"has closed (or the reservation ended in it), counted against a meter such as\n" +
			"gpu.h100.hours. Quantities are exact GPU-microseconds; hours are shown for\n" +
			"reading. `list` prints a page; `export` writes every window as CSV or JSON.",
	}
	cmd.AddCommand(newUsageListCommand(g), newUsageExportCommand(g))
	return cmd
}

// usageFilters are the flags list and export share.
type usageFilters struct {
	req          apiv1.ListUsageRequest
	since, until string
}

func (u *usageFilters) add(g *globals, cmd *cobra.Command) {
	f := cmd.Flags()
	addTenantFlag(g, cmd, &u.req.Tenant)
	f.BoolVar(&u.req.AllTenants, "all-tenants", false, "every tenant's usage (platform only)")
	f.StringVar(&u.req.Principal, "principal", "", `only usage of reservations by this principal, such as 'User::"acme/alice"'`)
	f.StringVar(&u.req.PoolTenant, "pool-tenant", "", "only usage from pools of this tenant")
	f.StringVar(&u.req.Pool, "pool", "", "only usage from the pool of this name")
	f.StringVar(&u.req.Meter, "meter", "", "only usage counted against this meter, such as gpu.h100.hours")
	f.StringVar(&u.since, "since", "", "only windows starting at or after this time: RFC 3339, or how long ago (1h, 7d)")
	f.StringVar(&u.until, "until", "", "only windows starting before this time: RFC 3339, or how long ago (1h, 7d)")
}

// request checks the filters and returns the request they make.
func (u *usageFilters) request() (*apiv1.ListUsageRequest, error) {
	req := &u.req
	if req.Tenant != "" && req.AllTenants {
		return nil, usageErrorf("--tenant and --all-tenants exclude each other: pass one of them")
	}
	now := time.Now()
	if u.since != "" {
		t, err := parseTime(u.since, now)
		if err != nil {
			return nil, usageErrorf("--since %v: use an RFC 3339 time (2025-01-02T15:04:05Z) or how long ago (1h, 7d)", err)
		}
		req.StartTime = timestamppb.New(t)
	}
	if u.until != "" {
		t, err := parseTime(u.until, now)
		if err != nil {
			return nil, usageErrorf("--until %v: use an RFC 3339 time (2025-01-02T15:04:05Z) or how long ago (1h, 7d)", err)
		}
		req.EndTime = timestamppb.New(t)
	}
	if req.StartTime != nil && req.EndTime != nil && !req.EndTime.AsTime().After(req.StartTime.AsTime()) {
		return nil, usageErrorf("--until %s is not after --since %s: no window can match; swap them or widen the range", u.until, u.since)
	}
	return req, nil
}

func newUsageListCommand(g *globals) *cobra.Command {
	var filters usageFilters
	var limit int
	var pageToken string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List usage windows by start time",
		Long: "list prints one page of usage windows, oldest first; when there are more, it\n" +
			"ends with the --page-token to pass for the next page (or use export for all).\n" +
			"--since and --until bound the windows' start: an RFC 3339 time or a duration\n" +
			"meaning that long ago (90m, 12h, 7d).",
		Example: "  better-compute usage list --since 24h\n" +
			"  better-compute usage list --tenant acme --meter gpu.h100.hours --since 2025-01-01T00:00:00Z --until 2025-02-01T00:00:00Z\n" +
			"  better-compute usage list --all-tenants --pool-tenant platform --pool shared",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := filters.request()
			if err != nil {
				return err
			}
			if limit < 0 || limit > maxUsagePage {
				return usageErrorf("--limit %d is out of range: give 1 to %d (0 for the server's default), and --page-token for further pages", limit, maxUsagePage)
			}
			req.PageSize, req.PageToken = int32(limit), pageToken
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Usage.ListUsage(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "START\tEND\tTENANT\tPRINCIPAL\tPOOL\tRESERVATION\tMETER\tGPUS\tGPU-HOURS")
				for _, u := range res.Msg.GetWindows() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s/%s\t%s\t%s\t%d\t%s\n", formatTime(u.GetStartTime(), "-"), formatTime(u.GetEndTime(), "-"),
						u.GetTenant(), orDash(u.GetPrincipal()), u.GetPoolTenant(), u.GetPool(), u.GetReservationId(), u.GetMeter(),
						u.GetGpus(), gpuHours(u.GetQuantity()))
				}
				if next := res.Msg.GetNextPageToken(); next != "" {
					fmt.Fprintf(w, "\nmore windows: repeat the command with --page-token %s\n", shellQuote(next))
				}
			})
		},
	}
	filters.add(g, cmd)
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("at most this many windows, up to %d (default: the server's, 100)", maxUsagePage))
	cmd.Flags().StringVar(&pageToken, "page-token", "", "continue where the previous page ended")
	return cmd
}

// gpuHours formats GPU-microseconds as GPU-hours with six decimals: a
// window's hours to within 3.6 ms of GPU time.
func gpuHours(quantity int64) string {
	return strconv.FormatFloat(float64(quantity)/microsPerHour, 'f', 6, 64)
}

// Export formats.
const (
	exportCSV  = "csv"
	exportJSON = "json"
)

func newUsageExportCommand(g *globals) *cobra.Command {
	var filters usageFilters
	var format, output string
	cmd := &cobra.Command{
		Use:   "export --format csv|json [--file FILE]",
		Short: "Write every usage window the filters select, as CSV or JSON",
		Long: "export pages through all the usage windows the filters select, oldest first,\n" +
			"and streams them to standard output or --file FILE: CSV with a header line,\n" +
			"or one JSON array. quantity is exact GPU-microseconds, gpu_hours the same in\n" +
			"hours; sum quantity for exact totals. A failed export removes --file FILE\n" +
			"rather than leave a partial one. --format is the export's format; the global\n" +
			"-o does not apply.",
		Example: "  better-compute usage export --format csv --since 2025-01-01T00:00:00Z --until 2025-02-01T00:00:00Z --file january.csv\n" +
			"  better-compute usage export --format json --all-tenants --meter gpu.h100.hours",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != exportCSV && format != exportJSON {
				return usageErrorf("--format %q is not an export format: use csv or json", format)
			}
			req, err := filters.request()
			if err != nil {
				return err
			}
			req.PageSize = maxUsagePage
			c, err := g.client()
			if err != nil {
				return err
			}
			if output == "" {
				return exportUsage(cmd.Context(), c, req, format, cmd.OutOrStdout())
			}
			f, err := os.Create(output)
			if err != nil {
				return fmt.Errorf("export usage: %w", err)
			}
			err = exportUsage(cmd.Context(), c, req, format, f)
			if cerr := f.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("export usage: %w", cerr)
			}
			if err != nil {
				_ = os.Remove(output)
			}
			return err
		},
	}
	filters.add(g, cmd)
	cmd.Flags().StringVar(&format, "format", "", "csv or json (required)")
	cmd.Flags().StringVar(&output, "file", "", "write to this file instead of standard output")
	_ = cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{exportCSV, exportJSON}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// usageCSVHeader names the CSV columns; usageCSVRow fills them.
var usageCSVHeader = []string{
	"key", "tenant", "principal", "pool_tenant", "pool", "reservation_id", "model", "meter", "gpus",
	"start_time", "end_time", "quantity", "gpu_hours", "create_time",
}

func usageCSVRow(u *apiv1.UsageWindow) []string {
	return []string{
		u.GetKey(), u.GetTenant(), u.GetPrincipal(), u.GetPoolTenant(), u.GetPool(), u.GetReservationId(),
		u.GetModel(), u.GetMeter(), strconv.Itoa(int(u.GetGpus())),
		formatTime(u.GetStartTime(), ""), formatTime(u.GetEndTime(), ""),
		strconv.FormatInt(u.GetQuantity(), 10), gpuHours(u.GetQuantity()), formatTime(u.GetCreateTime(), ""),
	}
}

// exportUsage pages through ListUsage from req and writes each page as it
// comes, so that an export of any size holds one page in memory.
func exportUsage(ctx context.Context, c *client.Client, req *apiv1.ListUsageRequest, format string, out io.Writer) error {
	bw := bufio.NewWriter(out)
	cw := csv.NewWriter(bw)
	first := true
	write := func(u *apiv1.UsageWindow) error {
		if format == exportCSV {
			return cw.Write(usageCSVRow(u))
		}
		b, err := marshalOpts.Marshal(u)
		if err != nil {
			return err
		}
		sep := ",\n  "
		if first {
			sep = "\n  "
		}
		first = false
		if _, err := bw.WriteString(sep); err != nil {
			return err
		}
		_, err = bw.Write(b)
		return err
	}
	var err error
	if format == exportCSV {
		err = cw.Write(usageCSVHeader)
	} else {
		_, err = bw.WriteString("[")
	}
	for err == nil {
		var res *connect.Response[apiv1.ListUsageResponse]
		if res, err = c.Usage.ListUsage(ctx, connect.NewRequest(req)); err != nil {
			return callError(c, err)
		}
		for _, u := range res.Msg.GetWindows() {
			if err = write(u); err != nil {
				break
			}
		}
		if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if err == nil && format == exportJSON {
		end := "\n]\n"
		if first {
			end = "]\n"
		}
		_, err = bw.WriteString(end)
	}
	cw.Flush()
	err = errors.Join(err, cw.Error(), bw.Flush())
	if err != nil {
		return fmt.Errorf("export usage: %w", err)
	}
	return nil
}
