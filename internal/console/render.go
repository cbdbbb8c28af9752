package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// pageTemplate is one page parsed together with the layout.
type pageTemplate = template.Template

// view is what every page template gets: the layout's needs and the page's
// own model in Data.
type view struct {
	Title string
	// Page names the template, and the nav entry shown as current.
	Page     string
	Signed   bool
	Tenant   string
	Platform bool
	// Principal is the signed-in caller, User::"acme/alice".
	Principal string
	// May names the admin pages the nav offers (tenants, principals,
	// groups, policies) and the admin forms the pages show: createGroups,
	// editGroups (also their members), editUsers and editServiceAccounts
	// (also creating and deleting them), editTenants, deleteTenants; see
	// formActions.
	May   map[string]bool
	CSRF  string
	Flash string
	Data  any
}

var funcs = template.FuncMap{
	"time":      fmtTime,
	"ago":       ago,
	"nodeState": nodeState,
	"resState":  resState,
	"active":    active,
	"join":      strings.Join,
	"labels":    fmtLabels,
	"bytes":     fmtBytes,
	"cmdState":  cmdState,
	"list":      func(v ...int) []int { return v },
	"lineCount": func(s string) int { return strings.Count(strings.TrimRight(s, "\n"), "\n") + 1 },
}

// parsePages parses each page with the layout, once, at mount.
func parsePages() (map[string]*pageTemplate, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*pageTemplate{}
	for _, n := range names {
		if path.Base(n) == "layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", n, err)
		}
		pages[strings.TrimSuffix(path.Base(n), ".html")] = t
	}
	return pages, nil
}

// render writes page with data inside the layout. It renders into a buffer
// first so that a template failure becomes a clean error, not half a page.
func (s *server) render(w http.ResponseWriter, r *http.Request, sess *session, status int, page, title string, data any) {
	v := view{Title: title, Page: page, Data: data}
	if sess != nil {
		v.Signed, v.Tenant, v.Platform, v.CSRF, v.Flash = true, sess.tenant, sess.platform, sess.csrf, sess.flash
		v.Principal = sess.principal
		v.May = map[string]bool{
			"tenants":    sess.may[actTenantsList],
			"principals": sess.may[actUsersList] || sess.may[actServiceAccountsList],
			"groups":     sess.may[actGroupsList],
			"policies":   sess.may[actPoliciesList],

			"createGroups":        sess.may[actGroupsCreate],
			"editGroups":          sess.may[actGroupsCreate],
			"editUsers":           sess.may[actUsersCreate],
			"editServiceAccounts": sess.may[actServiceAccountsCreate],
			"editTenants":         sess.may[actTenantsUpdate],
			"deleteTenants":       sess.may[actTenantsDelete],
		}
	}
	var buf bytes.Buffer
	if err := s.pages[page].Execute(&buf, v); err != nil {
		s.logger.Error("console: render", "page", page, "path", r.URL.Path, "err", err)
		http.Error(w, "the console failed to render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// renderError shows msg, the API's own words, as the page.
func (s *server) renderError(w http.ResponseWriter, r *http.Request, sess *session, status int, msg string) {
	s.render(w, r, sess, status, "error", "Error", msg)
}

func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil || !ts.IsValid() || ts.AsTime().IsZero() {
		return "-"
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago is how long before now ts was (or, negative, how long until it).
func ago(ts *timestamppb.Timestamp) string {
	if ts == nil || !ts.IsValid() {
		return "-"
	}
	d := time.Since(ts.AsTime())
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, " from now"
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds%s", int(d.Seconds()), suffix)
	case d < time.Hour:
		return fmt.Sprintf("%dm%s", int(d.Minutes()), suffix)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm%s", int(d.Hours()), int(d.Minutes())%60, suffix)
	}
	return fmt.Sprintf("%dd%s", int(d.Hours()/24), suffix)
}

// nodeState is a node state's short name: READY becomes "ready".
func nodeState(s apiv1.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATE_"))
}

// resState is a reservation state's short name: BOUND becomes "bound".
func resState(s apiv1.ReservationState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RESERVATION_STATE_"))
}

// active is true while a reservation holds its GPUs.
func active(s apiv1.ReservationState) bool {
	return s == apiv1.ReservationState_RESERVATION_STATE_PLACED || s == apiv1.ReservationState_RESERVATION_STATE_BOUND
}

func fmtLabels(m map[string]string) string {
	keys := sortedKeys(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ", ")
}

func fmtBytes(n int64) string {
	const gib = 1 << 30
	if n >= gib {
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// cmdState is a command state's short name: SUCCEEDED becomes "succeeded".
func cmdState(s apiv1.NodeCommandState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_COMMAND_STATE_"))
}
