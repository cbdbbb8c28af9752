package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestIdentityStory is the identity issue's story with the real binaries:
// the dev admin sets up a tenant and its admin; the tenant admin works in
// their tenant, cannot see another, installs a shipped policy; a revoked
// token stops working at once; the audit log shows it all.
func TestIdentityStory(t *testing.T) {
	t.Parallel()
	admin := newUser(t)
	s := admin.start("dev", "--listen", "127.0.0.1:0")
	s.await("Better Compute dev is running")
	if !strings.Contains(s.output.String(), "token bc_") {
		t.Errorf("dev did not print the admin token:\n%s", s.output.String())
	}
	must := func(u *user, args ...string) string {
		t.Helper()
		out, stderr, code := u.run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		return out
	}
	fails := func(u *user, want string, args ...string) {
		t.Helper()
		_, stderr, code := u.run(args...)
		if code == 0 || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line containing %q", args, code, stderr, want)
		}
	}

	// The dev context carries the platform admin's token.
	must(admin, "tenants", "create", "acme")
	must(admin, "tenants", "create", "globex")
	must(admin, "users", "create", "alice", "--tenant", "acme")
	must(admin, "users", "create", "carol", "--tenant", "globex")
	must(admin, "groups", "add-member", "admins", "alice", "--tenant", "acme")
	var created struct {
		Token  struct{ ID string }
		Secret string
	}
	if err := json.Unmarshal([]byte(must(admin, "tokens", "create", "--tenant", "acme", "--principal", "alice", "--ttl", "1h", "-o", "json")), &created); err != nil || !strings.HasPrefix(created.Secret, "bc_") {
		t.Fatalf("tokens create: %v %+v", err, created)
	}

	alice := newUser(t)
	alice.env = append(alice.env, "BETTER_COMPUTE_SERVER="+s.url, "BETTER_COMPUTE_TOKEN="+created.Secret)
	if out := must(alice, "users", "list"); !strings.Contains(out, "alice") {
		t.Errorf("alice's users list: %q", out)
	}
	fails(alice, "not found", "users", "get", "carol", "--tenant", "globex")
	fails(alice, "permission denied", "tenants", "list")
	must(alice, "users", "create", "bob", "--display-name", "Bob")
	must(alice, "policies", "put", "reserve-bounded", filepath.Join("..", "..", "examples", "policies", "reserve-bounded.cedar"))
	must(alice, "policies", "validate", filepath.Join("..", "..", "examples", "policies", "bounded-extend.cedar"))

	audit := must(admin, "audit", "list", "--tenant", "acme", "-o", "json")
	for _, want := range []string{"compute:users:create", "compute:policies:put", "not_found", "permission_denied"} {
		if !strings.Contains(audit, want) {
			t.Errorf("acme's audit log lacks %s", want)
		}
	}

	must(admin, "tokens", "revoke", created.Token.ID, "--tenant", "acme")
	fails(alice, "was revoked", "users", "list")
	s.stop(syscall.SIGINT)
}
