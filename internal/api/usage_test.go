package api_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestListUsage runs ListUsage on both engines: a tenant's admin sees its
// own tenant's usage only, the platform any tenant's or all, and pages
// visit every window once.
func TestListUsage(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		ctx := context.Background()
		base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		record := func(tenant, pool string, hours int) {
			t.Helper()
			id := f.reserve(tenant, tenant, pool, 1)
			r, err := f.store.GetReservation(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var ws []store.UsageWindow
			for h := range hours {
				start := base.Add(time.Duration(h) * time.Hour)
				ws = append(ws, store.UsageWindow{
					Key: fmt.Sprintf("%s/h100-sxm/%d", id, start.Unix()), Tenant: r.Tenant, Principal: r.Principal,
					PoolTenant: r.PoolTenant, Pool: r.Pool, ReservationID: id, ModelKey: "h100-sxm",
					Meter: "gpu.h100.hours", GPUs: 1, WindowStart: start, WindowEnd: start.Add(time.Hour),
					Quantity: store.MicrosPerHour,
				})
			}
			if err := f.store.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				_, err := q.RecordUsage(ctx, id, ws, base.Add(time.Duration(hours)*time.Hour))
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		record("acme", "main", 3)
		record("globex", "main", 2)

		const list = "/bettercompute.api.v1.UsageService/ListUsage"
		tenants := func(res result) []string {
			t.Helper()
			if res.code != "ok" {
				t.Fatalf("ListUsage: %s (%s)", res.code, res.msg)
			}
			var out []string
			ws, _ := res.body["windows"].([]any)
			for _, w := range ws {
				w := w.(map[string]any)
				if w["quantity"] != fmt.Sprint(store.MicrosPerHour) || w["meter"] != "gpu.h100.hours" {
					t.Errorf("window %v", w)
				}
				out = append(out, w["tenant"].(string))
			}
			return out
		}
		if got := tenants(f.call(list, f.tokens["acme/alice"], map[string]any{})); !slices.Equal(got, []string{"acme", "acme", "acme"}) {
			t.Errorf("acme's admin lists %v, want acme's 3 windows", got)
		}
		if res := f.call(list, f.tokens["acme/alice"], map[string]any{"tenant": "globex"}); res.code != "not_found" {
			t.Errorf("acme's admin listing globex: %s (%s), want not_found", res.code, res.msg)
		}
		if res := f.call(list, f.tokens["acme/alice"], map[string]any{"allTenants": true}); res.code != "permission_denied" {
			t.Errorf("acme's admin listing all tenants: %s (%s), want permission_denied", res.code, res.msg)
		}
		if got := tenants(f.call(list, f.tokens["platform/admin"], map[string]any{"tenant": "globex"})); !slices.Equal(got, []string{"globex", "globex"}) {
			t.Errorf("the platform lists globex's %v, want 2 windows", got)
		}
		if got := tenants(f.call(list, f.tokens["platform/admin"], map[string]any{"allTenants": true, "startTime": base.Add(time.Hour).Format(time.RFC3339)})); len(got) != 3 {
			t.Errorf("the platform lists all tenants from the second hour: %v, want 3 windows", got)
		}

		// Pages of 2 visit acme's 3 windows once.
		var seen []string
		req := map[string]any{"pageSize": 2}
		for range 5 {
			res := f.call(list, f.tokens["acme/alice"], req)
			seen = append(seen, tenants(res)...)
			next, _ := res.body["nextPageToken"].(string)
			if next == "" {
				break
			}
			req["pageToken"] = next
		}
		if len(seen) != 3 {
			t.Errorf("paging saw %d windows, want 3", len(seen))
		}

		for name, req := range map[string]map[string]any{
			"bad page token":   {"pageToken": "nope"},
			"a forged key":     {"pageToken": base64.RawURLEncoding.EncodeToString([]byte("ur-1\x00/x"))},
			"page too big":     {"pageSize": 1001},
			"a time past 9999": {"startTime": "10000-01-01T00:00:00Z"},
			"end before start": {"startTime": base.Format(time.RFC3339), "endTime": base.Add(-time.Hour).Format(time.RFC3339)},
		} {
			if res := f.call(list, f.tokens["acme/alice"], req); res.code != "invalid_argument" {
				t.Errorf("%s: %s (%s), want invalid_argument", name, res.code, res.msg)
			}
		}
	})
}
