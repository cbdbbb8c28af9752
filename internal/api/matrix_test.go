package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/api"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// row is one method of the authorization matrix.
type row struct {
	// body is the request naming a resource of tenant (ignored by system rows).
	body func(f *fixture, tenant string) map[string]any
	// system marks methods on the deployment itself: no tenant to cross, and
	// the permitted caller is the platform admin.
	system bool
	// anyone marks a method every authenticated caller may call without a
	// policy (WhoAmI): the principal with no policy gets ok, and no audit
	// event, instead of a denial.
	anyone bool
	// permitted, when set, is the permitted call instead of acme's admin
	// acting in acme: the caller's token key and the request.
	permitted func(f *fixture) (string, map[string]any)
}

func in(tenant string, kv ...any) map[string]any {
	m := map[string]any{"tenant": tenant}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// matrix has a row for every method of the API; TestAuthzMatrix fails for a
// method without one.
var matrix = map[string]row{
	"/bettercompute.api.v1.SystemService/GetVersion": {system: true},
	"/bettercompute.api.v1.SystemService/GetStatus":  {system: true},
	"/bettercompute.api.v1.SystemService/WhoAmI":     {system: true, anyone: true},

	"/bettercompute.api.v1.TenantService/CreateTenant": {system: true, body: func(*fixture, string) map[string]any { return map[string]any{"name": "newco"} }},
	"/bettercompute.api.v1.TenantService/ListTenants":  {system: true},
	"/bettercompute.api.v1.TenantService/GetTenant":    {body: func(_ *fixture, t string) map[string]any { return map[string]any{"name": t} }},
	"/bettercompute.api.v1.TenantService/UpdateTenant": {body: func(_ *fixture, t string) map[string]any { return map[string]any{"name": t, "displayName": "New name"} }},
	"/bettercompute.api.v1.TenantService/DeleteTenant": {
		body: func(_ *fixture, t string) map[string]any { return map[string]any{"name": t} },
		permitted: func(*fixture) (string, map[string]any) {
			return "platform/admin", map[string]any{"name": "doomed"}
		},
	},

	"/bettercompute.api.v1.UserService/CreateUser": {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "newuser") }},
	"/bettercompute.api.v1.UserService/GetUser":    {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "bob") }},
	"/bettercompute.api.v1.UserService/ListUsers":  {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.UserService/UpdateUser": {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "bob", "email", "bob@example.com") }},
	"/bettercompute.api.v1.UserService/DeleteUser": {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "gone") }},

	"/bettercompute.api.v1.ServiceAccountService/CreateServiceAccount": {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "newsa") }},
	"/bettercompute.api.v1.ServiceAccountService/GetServiceAccount":    {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "ci") }},
	"/bettercompute.api.v1.ServiceAccountService/ListServiceAccounts":  {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.ServiceAccountService/UpdateServiceAccount": {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "ci", "description", "CI runner") }},
	"/bettercompute.api.v1.ServiceAccountService/DeleteServiceAccount": {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "gone-sa") }},

	"/bettercompute.api.v1.GroupService/CreateGroup":       {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "newgroup") }},
	"/bettercompute.api.v1.GroupService/GetGroup":          {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "admins") }},
	"/bettercompute.api.v1.GroupService/ListGroups":        {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.GroupService/UpdateGroup":       {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "staff", "description", "Staff") }},
	"/bettercompute.api.v1.GroupService/DeleteGroup":       {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "doomed-group") }},
	"/bettercompute.api.v1.GroupService/AddGroupMember":    {body: func(_ *fixture, t string) map[string]any { return in(t, "group", "staff", "member", "ci") }},
	"/bettercompute.api.v1.GroupService/RemoveGroupMember": {body: func(_ *fixture, t string) map[string]any { return in(t, "group", "staff", "member", "carl") }},

	"/bettercompute.api.v1.TokenService/CreateToken": {body: func(_ *fixture, t string) map[string]any { return in(t, "principal", "bob", "ttl", "3600s") }},
	"/bettercompute.api.v1.TokenService/GetToken":    {body: func(f *fixture, t string) map[string]any { return in(t, "id", f.tokenIDs[t+"/get"]) }},
	"/bettercompute.api.v1.TokenService/ListTokens":  {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.TokenService/RevokeToken": {body: func(f *fixture, t string) map[string]any {
		if t == "globex" {
			return in(t, "id", f.tokenIDs["globex/get"])
		}
		return in(t, "id", f.tokenIDs[t+"/revoke"])
	}},

	"/bettercompute.api.v1.PolicyService/PutPolicy": {body: func(_ *fixture, t string) map[string]any {
		return in(t, "name", "extra", "body", fmt.Sprintf(`permit(principal in Group::"%s/staff", action == Action::"compute:users:list", resource in Tenant::"%s");`, t, t))
	}},
	"/bettercompute.api.v1.PolicyService/GetPolicy":    {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "tenant-admins") }},
	"/bettercompute.api.v1.PolicyService/ListPolicies": {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.PolicyService/DeletePolicy": {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "spare") }},
	"/bettercompute.api.v1.PolicyService/ValidatePolicy": {body: func(_ *fixture, t string) map[string]any {
		return in(t, "body", "permit(principal, action, resource);")
	}},
	"/bettercompute.api.v1.PolicyService/GetSchema": {body: func(_ *fixture, t string) map[string]any { return in(t) }},

	"/bettercompute.api.v1.AuditService/ListAuditEvents": {body: func(_ *fixture, t string) map[string]any { return in(t) }},

	"/bettercompute.api.v1.NodeService/ListNodes":   {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.NodeService/GetNode":     {body: func(_ *fixture, t string) map[string]any { return in(t, "id", "n-"+t+"-1") }},
	"/bettercompute.api.v1.NodeService/RevokeNode":  {body: func(_ *fixture, t string) map[string]any { return in(t, "id", "n-"+t+"-2") }},
	"/bettercompute.api.v1.NodeService/DeleteNode":  {body: func(_ *fixture, t string) map[string]any { return in(t, "id", "n-"+t+"-3") }},
	"/bettercompute.api.v1.NodeService/ExecCommand": {body: func(_ *fixture, t string) map[string]any { return in(t, "nodeId", "n-"+t+"-1", "kind", "diag.nvml") }},
	"/bettercompute.api.v1.NodeService/GetCommand": {body: func(f *fixture, t string) map[string]any {
		return in(t, "nodeId", "n-"+t+"-1", "id", f.tokenIDs[t+"/command"])
	}},
	"/bettercompute.api.v1.NodeService/ListCommands": {body: func(_ *fixture, t string) map[string]any { return in(t, "nodeId", "n-"+t+"-1") }},
	"/bettercompute.api.v1.NodeService/AdoptNode":    {body: func(_ *fixture, t string) map[string]any { return in(t, "id", "n-"+t+"-1", "pool", "main") }},
	"/bettercompute.api.v1.NodeService/CordonNode":   {body: func(_ *fixture, t string) map[string]any { return in(t, "id", "n-"+t+"-1") }},
	"/bettercompute.api.v1.NodeService/UncordonNode": {body: func(_ *fixture, t string) map[string]any { return in(t, "id", "n-"+t+"-1") }},
	"/bettercompute.api.v1.NodeService/DrainNode":    {body: func(_ *fixture, t string) map[string]any { return in(t, "id", "n-"+t+"-1") }},
	"/bettercompute.api.v1.NodeService/LabelNode": {body: func(_ *fixture, t string) map[string]any {
		return in(t, "id", "n-"+t+"-1", "set", map[string]any{"rack": "r7"})
	}},

	"/bettercompute.api.v1.PoolService/CreatePool":  {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "newpool", "description", "New") }},
	"/bettercompute.api.v1.PoolService/ListPools":   {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.PoolService/GetPool":     {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "main") }},
	"/bettercompute.api.v1.PoolService/UpdatePool":  {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "main", "description", "Main") }},
	"/bettercompute.api.v1.PoolService/DeletePool":  {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "spare-pool") }},
	"/bettercompute.api.v1.PoolService/OfferPool":   {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "main", "toTenant", "globex") }},
	"/bettercompute.api.v1.PoolService/UnofferPool": {body: func(_ *fixture, t string) map[string]any { return in(t, "name", "main", "toTenant", "platform") }},

	"/bettercompute.api.v1.ReservationService/CreateReservation": {body: func(_ *fixture, t string) map[string]any {
		return in(t, "pool", "main", "gpus", 1, "duration", "3600s")
	}},
	"/bettercompute.api.v1.ReservationService/GetReservation":   {body: func(f *fixture, t string) map[string]any { return in(t, "id", f.tokenIDs[t+"/reservation"]) }},
	"/bettercompute.api.v1.ReservationService/ListReservations": {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.ReservationService/ExtendReservation": {body: func(f *fixture, t string) map[string]any {
		return in(t, "id", f.tokenIDs[t+"/reservation"], "duration", "3600s")
	}},
	"/bettercompute.api.v1.ReservationService/ReleaseReservation": {body: func(f *fixture, t string) map[string]any { return in(t, "id", f.tokenIDs[t+"/release"]) }},

	"/bettercompute.api.v1.UsageService/ListUsage": {body: func(_ *fixture, t string) map[string]any { return in(t) }},

	"/bettercompute.api.v1.WebhookService/CreateWebhook": {body: func(_ *fixture, t string) map[string]any {
		return in(t, "url", "https://93.184.215.14/hook", "events", []string{"reservation.*"})
	}},
	"/bettercompute.api.v1.WebhookService/ListWebhooks":          {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.WebhookService/GetWebhook":            {body: webhookIn},
	"/bettercompute.api.v1.WebhookService/DeleteWebhook":         {body: webhookIn},
	"/bettercompute.api.v1.WebhookService/EnableWebhook":         {body: webhookIn},
	"/bettercompute.api.v1.WebhookService/RotateWebhookSecret":   {body: webhookIn},
	"/bettercompute.api.v1.WebhookService/TestWebhook":           {body: webhookIn},
	"/bettercompute.api.v1.WebhookService/ListWebhookDeliveries": {body: webhookIn},
	"/bettercompute.api.v1.EventService/ListEvents":              {body: func(_ *fixture, t string) map[string]any { return in(t) }},

	"/bettercompute.api.v1.JoinTokenService/CreateJoinToken": {body: func(_ *fixture, t string) map[string]any { return in(t, "ttl", "3600s") }},
	"/bettercompute.api.v1.JoinTokenService/ListJoinTokens":  {body: func(_ *fixture, t string) map[string]any { return in(t) }},
	"/bettercompute.api.v1.JoinTokenService/RevokeJoinToken": {body: func(f *fixture, t string) map[string]any { return in(t, "id", f.tokenIDs[t+"/join"]) }},
	"/bettercompute.api.v1.JoinTokenService/GetInstallScript": {body: func(f *fixture, t string) map[string]any {
		_, token, _ := pki.NewJoinToken(f.authority.ServingPin())
		return in(t, "joinToken", token)
	}},
}

// TestAuthzMatrix calls every method of the API four ways: with no token
// (unauthenticated), as a principal no policy permits (permission_denied),
// at another tenant's resource (not_found, exactly as for a missing one),
// and as a permitted principal (ok). Denials and changes must each leave an
// audit event.
func TestAuthzMatrix(t *testing.T) {
	t.Parallel()
	methods, err := api.LoadMethods()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range api.SortedProcedures(methods) {
		if _, ok := matrix[p]; !ok {
			t.Errorf("%s has no row in the authorization matrix (matrix_test.go): add one", p)
		}
	}
	for p := range matrix {
		if _, ok := methods[p]; !ok {
			t.Errorf("matrix row %s names no method", p)
		}
	}
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		for _, p := range api.SortedProcedures(methods) {
			r, ok := matrix[p]
			if !ok {
				continue
			}
			m := methods[p]
			action := m.Authorization.GetAction()
			body := func(tenant string) map[string]any {
				if r.body == nil {
					return map[string]any{}
				}
				return r.body(f, tenant)
			}
			expectDenial := func(how string, res result, code string) {
				t.Helper()
				if res.code != code {
					t.Errorf("%s %s: got %s (%s), want %s", p, how, res.code, res.msg, code)
					return
				}
				if e := f.lastAudit(); e.Decision != "deny" || e.Action != action {
					t.Errorf("%s %s: last audit event is %+v, want a denial of %s", p, how, e, action)
				}
			}

			expectDenial("anonymous", f.call(p, "", body("acme")), "unauthenticated")
			expectDenial("with a malformed token", f.call(p, "bc_notatoken", body("acme")), "unauthenticated")
			if r.anyone {
				before := f.lastAudit().ID
				if res := f.call(p, f.tokens["acme/bob"], body("acme")); res.code != "ok" {
					t.Errorf("%s by a principal with no policy: got %s (%s), want ok", p, res.code, res.msg)
				}
				if e := f.lastAudit(); e.ID != before {
					t.Errorf("%s by a principal with no policy: wrote audit event %+v, want none", p, e)
				}
			} else {
				expectDenial("by a principal with no policy", f.call(p, f.tokens["acme/bob"], body("acme")), "permission_denied")
			}
			if !r.system {
				res := f.call(p, f.tokens["acme/alice"], body("globex"))
				expectDenial("at another tenant's resource", res, "not_found")
				if strings.Contains(res.msg, "permission") {
					t.Errorf("%s: the cross-tenant answer %q hints at permissions", p, res.msg)
				}
			}

			who, req := "acme/alice", body("acme")
			if r.system {
				who = "platform/admin"
			}
			if r.permitted != nil {
				who, req = r.permitted(f)
			}
			res := f.call(p, f.tokens[who], req)
			if res.code != "ok" {
				t.Errorf("%s as %s: got %s (%s), want ok", p, who, res.code, res.msg)
				continue
			}
			if m.Mutating {
				if e := f.lastAudit(); e.Decision != "allow" || e.Action != action || e.Reason != "ok" || len(e.Policies) == 0 {
					t.Errorf("%s as %s: last audit event is %+v, want the allowed change with its policies", p, who, e)
				}
			}
		}
	})
}
