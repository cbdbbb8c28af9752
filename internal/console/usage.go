package console

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// usageData is the usage page's model.
type usageData struct {
	Days       int
	AllTenants bool
	Platform   bool
	Rows       []usageRow
	Total      string
	Chart      barChart
	Legend     []series
	// CSV is the CSV link's address, with the page's filters: the whole
	// href, so that html/template keeps its = and &.
	CSV string
}

// usageRow is one day's GPU-hours of one tenant and model.
type usageRow struct {
	Day, Tenant, Model string
	Hours              string
}

// usageFilter reads the page's filters: the last N days (7 by default, at
// most 366), and, for the platform, every tenant.
func usageFilter(r *http.Request, sess *session) (days int, all bool, req *apiv1.ListUsageRequest) {
	days, err := strconv.Atoi(r.URL.Query().Get("days"))
	if err != nil || days < 1 || days > 366 {
		days = 7
	}
	all = sess.platform && r.URL.Query().Get("all") == "on"
	start := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -(days - 1))
	return days, all, &apiv1.ListUsageRequest{AllTenants: all, StartTime: timestamppb.New(start)}
}

func (s *server) usage(w http.ResponseWriter, r *http.Request, sess *session) error {
	days, all, req := usageFilter(r, sess)
	start := req.GetStartTime().AsTime()
	windows, err := s.usageWindows(r.Context(), sess, req)
	if err != nil {
		return err
	}
	q := url.Values{"days": {strconv.Itoa(days)}}
	if all {
		q.Set("all", "on")
	}
	d := usageData{Days: days, AllTenants: all, Platform: sess.platform, CSV: "/usage.csv?" + q.Encode()}
	type key struct{ day, tenant, model string }
	sums := map[key]int64{}
	seriesIdx := map[string]int{}
	var total int64
	c := barChart{Label: fmt.Sprintf("GPU-hours by day over the last %d days (UTC), by tenant and model", days), Unit: "GPU-hours"}
	for i := range days {
		c.X = append(c.X, start.AddDate(0, 0, i).Format("01-02"))
	}
	for _, u := range windows {
		t := u.GetStartTime().AsTime().UTC()
		k := key{t.Format("2006-01-02"), u.GetTenant(), u.GetModel()}
		sums[k] += u.GetQuantity()
		total += u.GetQuantity()
		name := u.GetTenant() + " " + u.GetModel()
		i, ok := seriesIdx[name]
		if !ok {
			i = len(c.Series)
			seriesIdx[name] = i
			c.Series = append(c.Series, series{Name: name, Color: palette[i%len(palette)], Values: make([]float64, days)})
		}
		if day := int(t.Sub(start) / (24 * time.Hour)); day >= 0 && day < days {
			c.Series[i].Values[day] += float64(u.GetQuantity()) / microsPerHour
		}
	}
	for k, q := range sums {
		d.Rows = append(d.Rows, usageRow{Day: k.day, Tenant: k.tenant, Model: k.model, Hours: strconv.FormatFloat(float64(q)/microsPerHour, 'f', 3, 64)})
	}
	sortRows(d.Rows)
	d.Total = strconv.FormatFloat(float64(total)/microsPerHour, 'f', 3, 64)
	d.Chart, d.Legend = c, c.Series
	s.render(w, r, sess, http.StatusOK, "usage", "Usage", d)
	return nil
}

// usageCSVHeader is the CLI's `usage export --format csv` header, so that
// one spreadsheet takes either.
var usageCSVHeader = []string{
	"key", "tenant", "principal", "pool_tenant", "pool", "reservation_id", "model", "meter", "gpus",
	"start_time", "end_time", "quantity", "gpu_hours", "create_time",
}

// usageCSV exports every window the page's filters select, page by page.
func (s *server) usageCSV(w http.ResponseWriter, r *http.Request, sess *session) error {
	days, _, req := usageFilter(r, sess)
	req.PageSize = 1000
	// Ask for the first page before writing anything, so that a refusal
	// is a page, not a truncated file.
	res, err := sess.api.Usage.ListUsage(r.Context(), connect.NewRequest(req))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="usage-last-%dd.csv"`, days))
	cw := csv.NewWriter(w)
	_ = cw.Write(usageCSVHeader)
	ts := func(t *timestamppb.Timestamp) string {
		if t == nil {
			return ""
		}
		return t.AsTime().UTC().Format(time.RFC3339)
	}
	for {
		for _, u := range res.Msg.GetWindows() {
			_ = cw.Write([]string{
				u.GetKey(), u.GetTenant(), u.GetPrincipal(), u.GetPoolTenant(), u.GetPool(), u.GetReservationId(),
				u.GetModel(), u.GetMeter(), strconv.Itoa(int(u.GetGpus())), ts(u.GetStartTime()), ts(u.GetEndTime()),
				strconv.FormatInt(u.GetQuantity(), 10), strconv.FormatFloat(float64(u.GetQuantity())/microsPerHour, 'f', 6, 64), ts(u.GetCreateTime()),
			})
		}
		if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
			break
		}
		if res, err = sess.api.Usage.ListUsage(r.Context(), connect.NewRequest(req)); err != nil {
			// Headers are gone: the best left is to log and cut the file short.
			s.logger.Error("console: usage export failed midway", "err", err)
			break
		}
	}
	cw.Flush()
	return nil
}

// sortRows orders rows newest day first, then by tenant and model.
func sortRows(rows []usageRow) {
	slices.SortFunc(rows, func(a, b usageRow) int {
		return cmp.Or(cmp.Compare(b.Day, a.Day), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Model, b.Model))
	})
}
