package iam

import (
	"fmt"
	"testing"
)

func TestCacheKey(t *testing.T) {
	t.Parallel()
	base := Request{
		Principal: Principal{Type: "User", Tenant: "acme", Name: "bob"},
		Action:    "compute:reservations:create",
		Resource:  Resource{Type: "Pool", Tenant: "platform", ID: "a100", Attrs: map[string]any{"offeredTo": []EntityRef{TenantRef("acme"), TenantRef("globex")}}},
		Context:   map[string]any{"gpus": 8, "durationHours": int64(2), "gpuModel": "A100", "pool": "platform/a100"},
	}
	with := func(f func(r *Request)) Request {
		r := base
		r.Resource.Attrs = map[string]any{"offeredTo": []EntityRef{TenantRef("acme"), TenantRef("globex")}}
		r.Context = map[string]any{"gpus": 8, "durationHours": int64(2), "gpuModel": "A100", "pool": "platform/a100"}
		f(&r)
		return r
	}
	tests := []struct {
		name string
		r    Request
		same bool
	}{
		{"identical", with(func(*Request) {}), true},
		{"int and int64 are one Long", with(func(r *Request) { r.Context["gpus"] = int64(8) }), true},
		{"sets have no order", with(func(r *Request) {
			r.Resource.Attrs["offeredTo"] = []EntityRef{TenantRef("globex"), TenantRef("acme")}
		}), true},
		{"other gpus", with(func(r *Request) { r.Context["gpus"] = 9 }), false},
		{"a number is not a string", with(func(r *Request) { r.Context["gpus"] = "8" }), false},
		{"missing context key", with(func(r *Request) { delete(r.Context, "gpus") }), false},
		{"other offer", with(func(r *Request) { r.Resource.Attrs["offeredTo"] = []EntityRef{TenantRef("acme")} }), false},
		{"other principal type", with(func(r *Request) { r.Principal.Type = "ServiceAccount" }), false},
		{"name boundaries", with(func(r *Request) { r.Principal.Tenant, r.Principal.Name = "acme/bob", "" }), false},
		{"a parent", with(func(r *Request) { r.Resource.Parents = []EntityRef{TenantRef("acme")} }), false},
		{"other action", with(func(r *Request) { r.Action = "compute:reservations:list" }), false},
	}
	want, ok := cacheKey(base)
	if !ok {
		t.Fatal("no key for the base request")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := cacheKey(tt.r)
			if !ok || (got == want) != tt.same {
				t.Errorf("key %q (%v) vs base %q: same = %v, want %v", got, ok, want, got == want, tt.same)
			}
		})
	}
	if _, ok := cacheKey(with(func(r *Request) { r.Context["x"] = 1.5 })); ok {
		t.Error("a float has a key")
	}
}

func TestDecisionCacheBounded(t *testing.T) {
	t.Parallel()
	c := newDecisionCache(8)
	c.reset(1)
	for i := range 100 {
		c.put(1, fmt.Sprint(i), Decision{Allow: true})
		if n := c.len(); n > 8 {
			t.Fatalf("%d entries in a cache of 8", n)
		}
	}
	// The latest entries are kept, and a hit in the older generation stays.
	if _, ok := c.get(1, "99"); !ok {
		t.Error("the newest entry is gone")
	}
	if _, ok := c.get(1, "96"); !ok {
		t.Error("an entry of the older generation is gone")
	}
	// Other epochs neither read nor write.
	c.put(0, "old", Decision{})
	if _, ok := c.get(1, "old"); ok {
		t.Error("an old epoch's decision was kept")
	}
	if _, ok := c.get(2, "99"); ok {
		t.Error("a decision served for another epoch")
	}
	c.reset(2)
	if c.len() != 0 {
		t.Error("reset kept entries")
	}
	c.reset(1)
	c.put(2, "x", Decision{})
	if _, ok := c.get(2, "x"); !ok {
		t.Error("a reset to an older epoch took effect")
	}
}
