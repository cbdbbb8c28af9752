package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestIdentityTables checks the human layouts: headers on lists, field and
// value for one object, the token secret alone on its line with its warning,
// and shell completion that asks the server for names.
func TestIdentityTables(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)

	contains := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}
	header := func(out, want string) {
		t.Helper()
		first, _, _ := strings.Cut(out, "\n")
		if got := strings.Join(strings.Fields(first), " "); got != want {
			t.Errorf("header = %q, want %q", got, want)
		}
	}

	contains(admin.table(t, "tenants", "create", "globex", "--display-name", "Globex"), "name", "globex", "display name", "Globex")
	out := admin.table(t, "tenants", "list")
	header(out, "NAME DISPLAY NAME PLATFORM CREATED")
	contains(out, "platform", "globex")

	contains(admin.table(t, "users", "create", "hank", "--tenant", "globex", "--email", "hank@globex.example"), "hank@globex.example")
	header(admin.table(t, "users", "list", "--tenant", "globex"), "NAME DISPLAY NAME EMAIL GROUPS CREATED")
	contains(admin.table(t, "service-accounts", "create", "deployer", "--tenant", "globex"), "deployer")
	header(admin.table(t, "service-accounts", "list", "--tenant", "globex"), "NAME DESCRIPTION GROUPS CREATED")

	admin.table(t, "groups", "add-member", "admins", "hank", "--tenant", "globex")
	out = admin.table(t, "groups", "get", "admins", "--tenant", "globex")
	if ok, _ := regexp.MatchString(`(?m)^members\s+hank$`, out); !ok {
		t.Errorf("groups get does not list member hank:\n%s", out)
	}
	header(admin.table(t, "groups", "list", "--tenant", "globex"), "NAME DESCRIPTION MEMBERS CREATED")

	out = admin.table(t, "tokens", "create", "--tenant", "globex", "--principal", "deployer", "--ttl", "12h")
	contains(out, "shown only this once", "principal", "deployer", "expires")
	if ok, _ := regexp.MatchString(`(?m)^bc_\S+$`, out); !ok {
		t.Errorf("tokens create does not print the secret alone on a line:\n%s", out)
	}
	out = admin.table(t, "tokens", "list", "--tenant", "globex")
	header(out, "ID PRINCIPAL DESCRIPTION EXPIRES LAST USED REVOKED")
	contains(out, "deployer", "never", "no")

	header(admin.table(t, "policies", "list", "--tenant", "globex"), "NAME CREATED UPDATED")
	contains(admin.table(t, "tenants", "delete", "globex"), "deleted tenant globex")

	out, _, err := admin.run(context.Background(), "tenants", "list", "-o", "yaml")
	if err != nil || !strings.Contains(out, "name: platform") {
		t.Errorf("tenants list -o yaml = %q, %v", out, err)
	}

	// Completion of names comes from the server.
	out = admin.table(t, "__complete", "tenants", "get", "")
	contains(out, "platform")
	out = admin.table(t, "__complete", "users", "get", "--tenant", "platform", "")
	contains(out, "admin")
}

// TestIdentityUsageErrors checks that each mistake in a command line is
// refused before any call (no server is configured here: reaching for one
// would fail differently), with one line and exit status 2.
func TestIdentityUsageErrors(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	broken := writeFile(t, "x.cedar", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"tenants", "get"}, "tenants get accepts 1 arg(s), received 0; usage: better-compute tenants get NAME"},
		{[]string{"tenants", "create", "a", "b"}, "accepts 1 arg(s), received 2"},
		{[]string{"tenants", "update", "acme"}, "nothing to update: pass --display-name"},
		{[]string{"users", "update", "alice"}, "nothing to update: pass --display-name, --email or both"},
		{[]string{"service-accounts", "update", "ci"}, "nothing to update: pass --description"},
		{[]string{"groups", "update", "ops"}, "nothing to update: pass --description"},
		{[]string{"groups", "add-member", "ops"}, "accepts 2 arg(s), received 1"},
		{[]string{"tokens", "create", "--ttl", "1d"}, "needs --principal"},
		{[]string{"tokens", "create", "--principal", "ci"}, "needs --ttl"},
		{[]string{"tokens", "create", "--principal", "ci", "--ttl", "soon"}, `--ttl "soon" is not a duration`},
		{[]string{"tokens", "create", "--principal", "ci", "--ttl", "-1h"}, `--ttl "-1h" is not a duration`},
		{[]string{"tokens", "create", "--principal", "ci", "--ttl", "30s"}, "--ttl 30s is out of range"},
		{[]string{"tokens", "create", "--principal", "ci", "--ttl", "400d"}, "--ttl 400d is out of range"},
		{[]string{"tokens", "revoke"}, "accepts 1 arg(s), received 0"},
		{[]string{"policies", "put", "p", "/no/such/file.cedar"}, "cannot read policy file /no/such/file.cedar: no such file or directory"},
		{[]string{"policies", "put", "p"}, "accepts 2 arg(s), received 1"},
		{[]string{"policies", "validate", broken, "extra"}, "accepts 1 arg(s), received 2"},
		{[]string{"audit", "list", "--limit", "-1"}, "--limit -1 is out of range"},
		{[]string{"audit", "list", "--limit", "5000"}, "--limit 5000 is out of range"},
		{[]string{"audit", "list", "--limit", "many"}, `invalid argument "many" for "--limit"`},
		{[]string{"audit", "list", "--since", "yesterday"}, `--since "yesterday" is neither an RFC 3339 time nor a duration`},
		{[]string{"audit", "list", "--until", "2025-13-01T00:00:00Z"}, "--until"},
		{[]string{"audit", "list", "--since", "1h", "--until", "2h"}, "--until 2h is not after --since 1h"},
		{[]string{"audit", "list", "--tenant", "acme", "--all-tenants"}, "--tenant and --all-tenants exclude each other"},
		{[]string{"audit", "list", "extra"}, "accepts 0 arg(s), received 1"},
		{[]string{"tenants", "list", "-o", "xml"}, `unknown output format "xml"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			err := e.fails(t, tt.want, tt.args...)
			if got := ExitCode(err); got != 2 {
				t.Errorf("exit code = %d, want 2", got)
			}
			if strings.HasPrefix(err.Error(), "better-compute ") {
				t.Errorf("error %q starts with the program's name, which main prints before it", err)
			}
		})
	}
}
