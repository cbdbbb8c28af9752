package api_test

import (
	"testing"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestDeleteTenantWithNodes: a tenant that still has nodes is not deleted,
// and the refusal says so and what to do (failed_precondition), not
// already_exists; the refusal is audited as other refused changes are.
// Both engines, since each reports the nodes' foreign key its own way.
func TestDeleteTenantWithNodes(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		res := f.call("/bettercompute.api.v1.TenantService/DeleteTenant", f.tokens["platform/admin"], map[string]any{"name": "acme"})
		const want = "tenant acme still has nodes: revoke and delete them first (better-compute nodes list --tenant acme)"
		if res.code != "failed_precondition" || res.msg != want {
			t.Errorf("delete acme: %s %q, want failed_precondition %q", res.code, res.msg, want)
		}
		if _, err := f.store.GetTenant(t.Context(), "acme"); err != nil {
			t.Errorf("acme after the refused delete: %v", err)
		}
		if e := f.lastAudit(); e.Action != "compute:tenants:delete" || e.Tenant != "acme" || e.Reason != "failed: failed_precondition" {
			t.Errorf("last audit event %+v, want acme's refused delete", e)
		}
	})
}
