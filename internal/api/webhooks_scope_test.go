package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestWebhookEventScope: a webhook delivers events to an outside URL, so
// making one needs what listing them needs: a principal who may create
// webhooks and list reservations, but not usage, may have a webhook of
// reservation events, and is refused usage.* and * (audited as a denial,
// nothing stored).
func TestWebhookEventScope(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		const create = "/bettercompute.api.v1.WebhookService/CreateWebhook"
		if _, err := f.store.PutPolicy(t.Context(), store.Policy{Tenant: "acme", Name: "hooks", Body: `permit (
  principal in Group::"acme/staff",
  action in [Action::"compute:webhooks:create", Action::"compute:reservations:list"],
  resource in Tenant::"acme"
);`}); err != nil {
			t.Fatal(err)
		}
		carl := f.newToken("acme", "carl", time.Hour)
		hook := func(events ...string) result {
			return f.call(create, carl, map[string]any{"url": "https://93.184.215.14/hook", "events": events})
		}

		if res := hook("reservation.*"); res.code != "ok" {
			t.Fatalf("CreateWebhook(reservation.*) = %s (%s), want ok", res.code, res.msg)
		}
		for _, tt := range []struct {
			events []string
			want   string
		}{
			{[]string{"usage.*"}, `events "usage.*" need compute:usage:list on tenant acme`},
			{[]string{"*"}, `events "*" need compute:nodes:list, compute:policies:list, compute:usage:list on tenant acme`},
			{[]string{"reservation.bound", "usage.closed"}, `events "usage.closed" need compute:usage:list on tenant acme`},
		} {
			before := f.lastAudit().ID
			res := hook(tt.events...)
			if res.code != "permission_denied" || !strings.Contains(res.msg, tt.want) || strings.Contains(res.msg, "\n") {
				t.Errorf("CreateWebhook(%v) = %s (%s), want permission_denied: %s", tt.events, res.code, res.msg, tt.want)
			}
			evs, err := f.store.ListAuditEvents(t.Context(), store.AuditFilter{AllTenants: true, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var mine []store.AuditEvent
			for _, e := range evs {
				if e.ID > before {
					mine = append(mine, e)
				}
			}
			if len(mine) != 1 || mine[0].Decision != "deny" || mine[0].Action != "compute:webhooks:create" || mine[0].Tenant != "acme" ||
				mine[0].Principal != `User::"acme/carl"` || !strings.Contains(mine[0].Reason, tt.want) {
				t.Errorf("CreateWebhook(%v) wrote audit events %+v, want one denial of compute:webhooks:create saying %s", tt.events, mine, tt.want)
			}
		}
		ws, err := f.store.ListWebhooks(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) != 1 || strings.Join(ws[0].Events, ",") != "reservation.*" {
			t.Errorf("acme's webhooks = %+v, want only the reservation.* one", ws)
		}
	})
}
