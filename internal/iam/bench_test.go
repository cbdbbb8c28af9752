package iam_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/iam"
)

// benchDirectory is acme with 1,000 policies, each granting one group
// reservations up to a bound, plus tenant-admins and the platform's few.
// conditionOnly writes the group test into the condition instead of the
// scope, which defeats the index: every statement is evaluated.
func benchDirectory(conditionOnly bool) iam.Directory {
	d := iam.Directory{
		Epoch:   1,
		Tenants: []iam.DirTenant{{Name: "platform", Platform: true}, {Name: "acme"}},
		Members: []iam.DirMember{
			{Tenant: "platform", Group: "admins", Member: "root"},
			{Tenant: "acme", Group: "admins", Member: "alice"},
		},
		Policies: []iam.DirPolicy{
			{Tenant: "platform", Name: "platform-admins", Body: iam.PlatformAdminsPolicy()},
			{Tenant: "platform", Name: "no-huge-reservations", Body: `forbid(principal, action == Action::"compute:reservations:create", resource) when { context.gpus > 512 };`},
			{Tenant: "platform", Name: "auditors", Body: `permit(principal in Group::"platform/auditors", action == Action::"compute:audit:list", resource);`},
			{Tenant: "acme", Name: "tenant-admins", Body: iam.TenantAdminsPolicy("acme")},
		},
	}
	for i := range 1000 {
		body := fmt.Sprintf(`permit(principal in Group::"acme/g%d", action == Action::"compute:reservations:create", resource) when { context.gpus <= %d };`, i, 1+i%16)
		if conditionOnly {
			body = fmt.Sprintf(`permit(principal, action == Action::"compute:reservations:create", resource) when { principal in Group::"acme/g%d" && context.gpus <= %d };`, i, 1+i%16)
		}
		d.Policies = append(d.Policies, iam.DirPolicy{Tenant: "acme", Name: fmt.Sprint("bound-", i), Body: body})
	}
	for _, g := range []int{7, 500, 999} {
		d.Members = append(d.Members, iam.DirMember{Tenant: "acme", Group: fmt.Sprint("g", g), Member: "bob"})
	}
	return d
}

var benchRequest = iam.Request{
	Principal: iam.Principal{Type: "User", Tenant: "acme", Name: "bob"},
	Action:    "compute:reservations:create",
	Resource:  iam.Resource{Type: "Pool", Tenant: "platform", ID: "a100", Attrs: map[string]any{"offeredTo": []iam.EntityRef{iam.TenantRef("acme")}}},
	Context:   map[string]any{"gpus": 8, "durationHours": 4, "gpuModel": "A100", "pool": "platform/a100"},
}

// BenchmarkAuthorize1000Policies decides one reservation by a member of
// three of the thousand groups, reporting ns/op and the 99th percentile of
// single decisions (p99-ns).
func BenchmarkAuthorize1000Policies(b *testing.B) {
	for _, bc := range []struct {
		name          string
		conditionOnly bool
	}{{"indexed", false}, {"condition-only", true}} {
		b.Run(bc.name, func(b *testing.B) {
			e, errs := iam.NewEngine(benchDirectory(bc.conditionOnly))
			if len(errs) > 0 {
				b.Fatal(errs)
			}
			if d := e.Authorize(benchRequest); !d.Allow || !slices.Equal(d.Policies, []string{"acme/bound-7#0", "acme/bound-999#0"}) {
				b.Fatalf("Authorize = %+v", d)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				e.Authorize(benchRequest)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			reportP99(b, lat)
		})
	}
}

// BenchmarkAuthorizerCached is the same decision answered from the
// Authorizer's cache, the usual case between two changes.
func BenchmarkAuthorizerCached(b *testing.B) {
	d := benchDirectory(false)
	a := iam.NewAuthorizer(func(context.Context) (iam.Directory, error) { return d, nil })
	ctx := b.Context()
	if dec, err := a.Authorize(ctx, 1, benchRequest); err != nil || !dec.Allow {
		b.Fatalf("Authorize = %+v, %v", dec, err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := a.Authorize(ctx, 1, benchRequest); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportP99(b, lat)
}

func reportP99(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
