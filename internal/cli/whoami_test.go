package cli

import (
	"strings"
	"testing"
	"time"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// TestWhoAmI: the platform admin and a service account no policy grants
// anything both learn who they are; a revoked token is told so.
func TestWhoAmI(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)

	me := &apiv1.WhoAmIResponse{}
	admin.do(t, me, "whoami")
	if me.GetPrincipalType() != "User" || me.GetTenant() != "platform" || me.GetName() != "admin" || !me.GetPlatform() || me.GetTokenId() == "" {
		t.Errorf("whoami as the platform admin = %v", me)
	}
	out := admin.table(t, "whoami")
	for _, want := range []string{`User::"platform/admin"`, "platform (platform)", me.GetTokenId()} {
		if !strings.Contains(out, want) {
			t.Errorf("whoami printed %q, want %q in it", out, want)
		}
	}

	admin.do(t, &apiv1.CreateTenantResponse{}, "tenants", "create", "acme")
	admin.do(t, &apiv1.CreateServiceAccountResponse{}, "service-accounts", "create", "ci", "--tenant", "acme")
	tk := &apiv1.CreateTokenResponse{}
	admin.do(t, tk, "tokens", "create", "--tenant", "acme", "--principal", "ci", "--ttl", "2h")
	ci := admin.as(tk.GetSecret())
	ci.fails(t, "permission denied", "users", "list")
	ci.do(t, me, "whoami")
	if me.GetPrincipalType() != "ServiceAccount" || me.GetTenant() != "acme" || me.GetName() != "ci" || me.GetPlatform() || me.GetTokenId() != tk.GetToken().GetId() {
		t.Errorf("whoami as acme/ci = %v", me)
	}
	if d := time.Until(me.GetTokenExpireTime().AsTime()); d < time.Hour || d > 2*time.Hour {
		t.Errorf("whoami: a 2h token expires in %v", d)
	}

	admin.do(t, &apiv1.RevokeTokenResponse{}, "tokens", "revoke", tk.GetToken().GetId(), "--tenant", "acme")
	ci.fails(t, "was revoked", "whoami")
	ci.fails(t, `unknown command "extra"`, "whoami", "extra")
}
