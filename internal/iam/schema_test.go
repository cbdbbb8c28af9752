package iam_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/iam"
)

// TestSchemaActions pins the actions the next issues build on, with their
// resource types, beside those the proto files declare (which
// TestSchemaCoversEveryMethod checks).
func TestSchemaActions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		actions   []string
		resources []string
	}{
		{[]string{"compute:pools:create", "compute:pools:list"}, []string{"Tenant"}},
		{[]string{"compute:pools:get", "compute:pools:update", "compute:pools:delete", "compute:pools:offer", "compute:pools:unoffer"}, []string{"Pool"}},
		{[]string{"compute:nodes:get", "compute:nodes:cordon", "compute:nodes:uncordon", "compute:nodes:drain", "compute:nodes:label", "compute:nodes:revoke", "compute:nodes:delete", "compute:nodes:exec-command"}, []string{"Node"}},
		{[]string{"compute:nodes:list"}, []string{"Pool", "Tenant"}},
		{[]string{"compute:nodes:adopt"}, []string{"Node", "Pool"}},
		{[]string{"compute:join-tokens:create", "compute:join-tokens:list"}, []string{"Pool", "Tenant"}},
		{[]string{"compute:join-tokens:revoke"}, []string{"JoinToken"}},
		{[]string{"compute:reservations:create"}, []string{"Pool"}},
		{[]string{"compute:reservations:get", "compute:reservations:extend", "compute:reservations:release"}, []string{"Reservation"}},
		{[]string{"compute:reservations:list"}, []string{"Pool", "Tenant"}},
		{[]string{"compute:usage:list", "compute:usage:export", "compute:events:list"}, []string{"Tenant"}},
		{[]string{"compute:system:read", "compute:tenants:create", "compute:tenants:list"}, []string{"System"}},
		{[]string{"compute:groups:add-member", "compute:groups:remove-member"}, []string{"Group"}},
		{[]string{"compute:policies:validate", "compute:policies:get-schema", "compute:audit:list"}, []string{"Tenant"}},
		{[]string{"compute:webhooks:create", "compute:webhooks:list"}, []string{"Tenant"}},
		{[]string{"compute:webhooks:get", "compute:webhooks:delete", "compute:webhooks:enable", "compute:webhooks:rotate", "compute:webhooks:test", "compute:webhooks:deliveries"}, []string{"Webhook"}},
	}
	all := iam.Actions()
	for _, tt := range tests {
		for _, a := range tt.actions {
			t.Run(a, func(t *testing.T) {
				t.Parallel()
				principals, resources, ok := iam.ActionAppliesTo(a)
				if !ok || !slices.Contains(all, a) {
					t.Fatalf("action %q is not in the schema", a)
				}
				if !slices.Equal(resources, tt.resources) || !slices.Equal(principals, []string{"ServiceAccount", "User"}) {
					t.Errorf("%s applies to %v on %v, want User and ServiceAccount on %v", a, principals, resources, tt.resources)
				}
			})
		}
	}
	if _, _, ok := iam.ActionAppliesTo("compute:nope"); ok {
		t.Error("ActionAppliesTo found an action that does not exist")
	}
}

// TestSchemaShapes checks the attributes and contexts policies may use by
// validating statements that use each of them.
func TestSchemaShapes(t *testing.T) {
	t.Parallel()
	const (
		create = `Action::"compute:reservations:create"`
		extend = `Action::"compute:reservations:extend"`
	)
	tests := []struct {
		name, body string
		valid      bool
	}{
		{"tenant attributes", `permit(principal, action == Action::"compute:users:list", resource) when { resource.name == "acme" && !resource.platform };`, true},
		{"principal attributes", `permit(principal, action, resource) when { principal.tenant.name == principal.name && principal.tenant.platform };`, true},
		{"group attributes", `permit(principal, action == Action::"compute:groups:get", resource) when { resource.tenant == principal.tenant && resource.name == "admins" };`, true},
		{"token and policy tenants", `permit(principal, action in [Action::"compute:tokens:get", Action::"compute:policies:put"], resource) when { resource.tenant == principal.tenant };`, true},
		{"pool attributes", `permit(principal, action == ` + create + `, resource) when { resource.offeredTo.contains(principal.tenant) && resource.name == "a100" && resource.tenant.platform };`, true},
		{"node and pool", `permit(principal, action == Action::"compute:nodes:drain", resource in Pool::"acme/p") when { resource.tenant == principal.tenant };`, true},
		{"reservation's pool", `permit(principal, action == ` + extend + `, resource) when { resource.pool.offeredTo.contains(resource.tenant) };`, true},
		{"create context", `permit(principal, action == ` + create + `, resource) when { context.gpus <= 8 && context.durationHours <= 72 && context.gpuModel == "H100" && context.pool == "platform/h100" };`, true},
		{"extend context", `permit(principal, action == ` + extend + `, resource) when { context.gpus <= 8 && context.durationHours <= 24 && context.totalDurationHours <= 72 && context.gpuModel like "*" && context.pool != "" };`, true},
		{"create has no total", `permit(principal, action == ` + create + `, resource) when { context.totalDurationHours <= 72 };`, false},
		{"other actions have an empty context", `permit(principal, action == Action::"compute:users:list", resource) when { context.gpus < 1 };`, false},
		{"system has no attributes", `permit(principal, action == Action::"compute:system:read", resource) when { resource.name == "x" };`, false},
		{"principals are never in pools", `permit(principal in Pool::"acme/p", action, resource);`, false},
		{"groups are not nested", `permit(principal, action == Action::"compute:groups:get", resource in Group::"acme/a");`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			probs := iam.ValidatePolicy(tt.body)
			if (probs == nil) != tt.valid {
				t.Errorf("ValidatePolicy = %v, want valid %v", probs, tt.valid)
			}
		})
	}
}

func TestSchemaText(t *testing.T) {
	t.Parallel()
	s := iam.Schema()
	for _, want := range []string{"entity Tenant", `action "compute:reservations:create"`, "totalDurationHours: Long"} {
		if !strings.Contains(s, want) {
			t.Errorf("Schema() lacks %q", want)
		}
	}
}
