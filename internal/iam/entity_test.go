package iam_test

import (
	"testing"

	"github.com/better-compute/better-compute/internal/iam"
)

func TestEntityStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"user", user("acme", "alice").String(), `User::"acme/alice"`},
		{"service account", iam.Principal{Type: "ServiceAccount", Tenant: "acme", Name: "ci"}.String(), `ServiceAccount::"acme/ci"`},
		{"system", iam.Resource{Type: "System"}.String(), `System::"deployment"`},
		{"tenant", tenantRes("acme").String(), `Tenant::"acme"`},
		{"tenant named by id", iam.Resource{Type: "Tenant", ID: "acme"}.String(), `Tenant::"acme"`},
		{"group", iam.Resource{Type: "Group", Tenant: "acme", ID: "admins"}.String(), `Group::"acme/admins"`},
		{"token", iam.Resource{Type: "Token", Tenant: "acme", ID: "abcd"}.String(), `Token::"acme/abcd"`},
		{"scoped ref", iam.ScopedRef("Pool", "acme", "a100").String(), `Pool::"acme/a100"`},
		{"tenant ref", iam.TenantRef("acme").String(), `Tenant::"acme"`},
		{"system ref", iam.SystemRef().String(), `System::"deployment"`},
		{"escaped", iam.TenantRef(`a"b\c`).String(), `Tenant::"a\"b\\c"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
			ref, err := iam.ParseEntityRef(tt.got)
			if err != nil || ref.String() != tt.got {
				t.Errorf("ParseEntityRef(%s) = %+v, %v; want it back", tt.got, ref, err)
			}
		})
	}
}

func TestParseEntityRefRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "alice", `User::alice`, `User:"a"`, `"a"`, `User::"a" extra`} {
		if ref, err := iam.ParseEntityRef(s); err == nil {
			t.Errorf("ParseEntityRef(%q) = %+v, want an error", s, ref)
		}
	}
}
