package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// TestAuditPages walks the log two events at a time and checks that the pages
// add up to the whole log, newest first, and that the table's hint for the
// next page is a flag that works as printed.
func TestAuditPages(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)
	admin.do(t, &apiv1.CreateTenantResponse{}, "tenants", "create", "pages")
	for i := range 5 {
		admin.do(t, &apiv1.CreateUserResponse{}, "users", "create", fmt.Sprintf("user-%d", i), "--tenant", "pages")
	}

	all := &apiv1.ListAuditEventsResponse{}
	admin.do(t, all, "audit", "list", "--tenant", "pages", "--limit", "1000")
	var want []int64
	for _, e := range all.GetEvents() {
		want = append(want, e.GetId())
	}
	if len(want) < 5 || all.GetNextPageToken() != "" {
		t.Fatalf("audit list --limit 1000 = %d events, next page %q; want at least the 5 user creations on one page", len(want), all.GetNextPageToken())
	}
	if !slices.IsSortedFunc(want, func(a, b int64) int { return cmp.Compare(b, a) }) {
		t.Errorf("events are not newest first: ids %v", want)
	}

	var got []int64
	pages := 0
	token := ""
	for {
		args := []string{"audit", "list", "--tenant", "pages", "--limit", "2"}
		if token != "" {
			args = append(args, "--page-token", token)
		}
		page := &apiv1.ListAuditEventsResponse{}
		admin.do(t, page, args...)
		pages++
		if n := len(page.GetEvents()); n > 2 {
			t.Fatalf("page %d has %d events, want at most 2", pages, n)
		}
		for _, e := range page.GetEvents() {
			got = append(got, e.GetId())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
		if pages > len(want) {
			t.Fatalf("more than %d pages: the page token does not advance", pages)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages of 2 gave ids %v, want %v", got, want)
	}
	if full := (len(want) + 1) / 2; pages < full || pages > full+1 {
		t.Errorf("%d events took %d pages of 2", len(want), pages)
	}

	// The table's last line names the flag for the next page.
	out := admin.table(t, "audit", "list", "--tenant", "pages", "--limit", "2")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	hint := lines[len(lines)-1]
	_, next, ok := strings.Cut(hint, "--page-token ")
	if !ok {
		t.Fatalf("table does not end with the next page's flag:\n%s", out)
	}
	second := &apiv1.ListAuditEventsResponse{}
	admin.do(t, second, "audit", "list", "--tenant", "pages", "--limit", "2", "--page-token", strings.Trim(next, "'"))
	if len(second.GetEvents()) == 0 || second.GetEvents()[0].GetId() != want[2] {
		t.Errorf("the page after the hint starts with %v, want id %d", second.GetEvents(), want[2])
	}
	header := strings.Fields(lines[0])
	if !slices.Equal(header, []string{"TIME", "PRINCIPAL", "ACTION", "RESOURCE", "DECISION", "REASON", "REQUEST"}) {
		t.Errorf("table header = %v", header)
	}
	if !strings.Contains(out, "compute:users:create") || !strings.Contains(out, `User::"platform/admin"`) {
		t.Errorf("table lacks the creations by the platform admin:\n%s", out)
	}

	// Time windows: durations mean "ago", RFC 3339 is absolute.
	window := &apiv1.ListAuditEventsResponse{}
	admin.do(t, window, "audit", "list", "--tenant", "pages", "--limit", "1000", "--since", "1h")
	if len(window.GetEvents()) != len(want) {
		t.Errorf("--since 1h = %d events, want all %d", len(window.GetEvents()), len(want))
	}
	admin.do(t, window, "audit", "list", "--tenant", "pages", "--until", "1h")
	if len(window.GetEvents()) != 0 {
		t.Errorf("--until 1h = %d events, want none (all are newer)", len(window.GetEvents()))
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	admin.do(t, window, "audit", "list", "--tenant", "pages", "--since", future)
	if len(window.GetEvents()) != 0 {
		t.Errorf("--since %s = %d events, want none", future, len(window.GetEvents()))
	}
	admin.do(t, window, "audit", "list", "--all-tenants", "--action", "compute:tenants:create")
	if len(window.GetEvents()) == 0 {
		t.Error("audit list --all-tenants --action compute:tenants:create found no tenant creation")
	}
}
