package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

const whoAmI = "/bettercompute.api.v1.SystemService/WhoAmI"

// TestWhoAmI: every authenticated caller learns its principal and token,
// whatever the policies say (even a forbid of everything), without an
// audit event; a caller without a valid token is refused as anywhere else.
func TestWhoAmI(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		ctx := context.Background()
		audits := func() int {
			evs, err := f.store.ListAuditEvents(ctx, store.AuditFilter{AllTenants: true, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			return len(evs)
		}
		ci := f.newToken("acme", "ci", 2*time.Hour)
		// A tenant that forbids everything still lets its principals ask
		// who they are.
		if _, err := f.store.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: "lockdown", Body: `forbid(principal, action, resource);`}); err != nil {
			t.Fatal(err)
		}

		tests := []struct {
			token                   string
			typ, tenant, name       string
			platform                bool
			expiresWithin, notAfter time.Duration
		}{
			{f.tokens["platform/admin"], "User", "platform", "admin", true, 0, time.Hour},
			{f.tokens["acme/alice"], "User", "acme", "alice", false, 0, time.Hour},
			{f.tokens["acme/bob"], "User", "acme", "bob", false, 0, time.Hour},
			{ci, "ServiceAccount", "acme", "ci", false, time.Hour, 2 * time.Hour},
		}
		for _, tt := range tests {
			before := audits()
			res := f.call(whoAmI, tt.token, map[string]any{})
			if res.code != "ok" {
				t.Errorf("%s/%s: got %s (%s), want ok", tt.tenant, tt.name, res.code, res.msg)
				continue
			}
			b := res.body
			platform, _ := b["platform"].(bool)
			if b["principalType"] != tt.typ || b["tenant"] != tt.tenant || b["name"] != tt.name || platform != tt.platform {
				t.Errorf("%s/%s: got %v", tt.tenant, tt.name, b)
			}
			id, _, _ := iam.ParseToken(tt.token)
			if b["tokenId"] != id {
				t.Errorf("%s/%s: token id %v, want %s", tt.tenant, tt.name, b["tokenId"], id)
			}
			exp, err := time.Parse(time.RFC3339Nano, b["tokenExpireTime"].(string))
			if left := time.Until(exp); err != nil || left <= tt.expiresWithin || left > tt.notAfter {
				t.Errorf("%s/%s: token expires %v (%v), want within (%v, %v]", tt.tenant, tt.name, b["tokenExpireTime"], err, tt.expiresWithin, tt.notAfter)
			}
			if n := audits(); n != before {
				t.Errorf("%s/%s: WhoAmI wrote %d audit events, want none", tt.tenant, tt.name, n-before)
			}
		}
		// Asked about actions, it answers from the policies: the platform
		// admin may list tenants, acme's admin (under the lockdown) nothing,
		// globex's admin its own tenant's policies but not every tenant.
		ask := []string{"compute:tenants:list", "compute:policies:list", "compute:pools:get", "compute:nope", "compute:self:read"}
		for _, tt := range []struct {
			who  string
			want []any
		}{
			{"platform/admin", []any{"compute:tenants:list", "compute:policies:list", "compute:self:read"}},
			{"acme/alice", []any{"compute:self:read"}},
			{"globex/carol", []any{"compute:policies:list", "compute:self:read"}},
		} {
			before := audits()
			res := f.call(whoAmI, f.tokens[tt.who], map[string]any{"actions": ask})
			got, _ := res.body["permittedActions"].([]any)
			if res.code != "ok" || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("%s asks about %v: got %s %v, want %v", tt.who, ask, res.code, got, tt.want)
			}
			if n := audits(); n != before {
				t.Errorf("%s: checking actions wrote %d audit events", tt.who, n-before)
			}
		}
		if res := f.call(whoAmI, f.tokens["acme/bob"], map[string]any{"actions": make([]string, 65)}); res.code != "invalid_argument" || !strings.Contains(res.msg, "at most 64") {
			t.Errorf("65 actions: got %s %q, want invalid_argument", res.code, res.msg)
		}

		// The lockdown does hold for everything else.
		if res := f.call(listUsers, f.tokens["acme/alice"], map[string]any{}); res.code != "permission_denied" {
			t.Errorf("ListUsers under a forbid-all policy: got %s, want permission_denied", res.code)
		}
		if res := f.call(whoAmI, "", map[string]any{}); res.code != "unauthenticated" || !strings.Contains(res.msg, "no API token") {
			t.Errorf("WhoAmI without a token: got %s %q, want unauthenticated", res.code, res.msg)
		}
	})
}
