package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestReservations runs the reservation policies and isolation on both
// engines: a user of acme's gpu-users group with pool-users,
// reserve-bounded and bounded-extend, reserving from platform pools.
func TestReservations(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		ctx := context.Background()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		_, err := f.store.CreateGroup(ctx, store.Group{Tenant: "acme", Name: "gpu-users"})
		must(err)
		_, err = f.store.CreatePrincipal(ctx, store.Principal{Tenant: "acme", Name: "dave", Kind: store.PrincipalUser})
		must(err)
		must(f.store.AddGroupMember(ctx, "acme", "gpu-users", "dave"))
		for _, name := range []string{"pool-users", "reserve-bounded", "bounded-extend"} {
			body, err := iam.ExamplePolicy(name, "acme")
			must(err)
			_, err = f.store.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: name, Body: body})
			must(err)
		}
		for _, name := range []string{"shared", "private"} {
			_, err := f.store.CreatePool(ctx, store.Pool{Tenant: "platform", Name: name})
			must(err)
		}
		must(f.store.OfferPool(ctx, "platform", "shared", "acme"))
		f.gpuNode("n-platform-big", "platform", "shared", 8)
		f.gpuNode("n-platform-small", "platform", "shared", 4)
		dave := f.newToken("acme", "dave", time.Hour)

		const (
			create  = "/bettercompute.api.v1.ReservationService/CreateReservation"
			get     = "/bettercompute.api.v1.ReservationService/GetReservation"
			extend  = "/bettercompute.api.v1.ReservationService/ExtendReservation"
			release = "/bettercompute.api.v1.ReservationService/ReleaseReservation"
		)
		reserve := func(gpus int, kv ...any) result {
			t.Helper()
			req := map[string]any{"poolTenant": "platform", "pool": "shared", "gpus": gpus, "duration": "86400s"}
			for i := 0; i < len(kv); i += 2 {
				req[kv[i].(string)] = kv[i+1]
			}
			return f.call(create, dave, req)
		}
		expect := func(what string, res result, code, msg string) {
			t.Helper()
			if res.code != code || !strings.Contains(res.msg, msg) {
				t.Errorf("%s: got %s (%s), want %s with %q", what, res.code, res.msg, code, msg)
			}
		}
		idOf := func(res result) string {
			r, _ := res.body["reservation"].(map[string]any)
			id, _ := r["id"].(string)
			return id
		}

		expect("an unknown model", reserve(1, "model", "nope"), "invalid_argument", "model")
		expect("zero GPUs", reserve(0), "invalid_argument", "gpus")

		// Idempotency: a retry returns the same reservation; a reuse is refused.
		a := reserve(1, "idempotencyKey", "k1")
		expect("a keyed reservation", a, "ok", "")
		b := reserve(1, "idempotencyKey", "k1")
		expect("its retry", b, "ok", "")
		if idOf(a) == "" || idOf(a) != idOf(b) {
			t.Errorf("the retry made %q, want %q", idOf(b), idOf(a))
		}
		expect("the key reused", reserve(2, "idempotencyKey", "k1"), "failed_precondition", "idempotency key")
		expect("release", f.call(release, dave, map[string]any{"id": idOf(a)}), "ok", "")
		expect("release again", f.call(release, dave, map[string]any{"id": idOf(a)}), "failed_precondition", "is released")

		// ReserveBounded: 8 allowed, 9 denied by the forbid.
		expect("9 GPUs", reserve(9), "permission_denied", "acme/reserve-bounded")
		r8 := reserve(8)
		expect("8 GPUs", r8, "ok", "")
		// The reservation from the platform's shared pool, and its denial,
		// are in acme's audit log, where acme's admins look.
		evs, err := f.store.ListAuditEvents(t.Context(), store.AuditFilter{Tenant: "acme", Action: "compute:reservations:create", Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		var allowed, denied bool
		for _, e := range evs {
			allowed = allowed || (e.Decision == "allow" && e.Reason == "ok")
			denied = denied || e.Decision == "deny"
		}
		if !allowed || !denied {
			t.Errorf("acme's audit log of reservations: allowed %v, denied %v; want both", allowed, denied)
		}
		// 12 GPUs in all, 8 taken.
		expect("8 more GPUs", reserve(8), "resource_exhausted", "has 4 free GPUs")

		// BoundedExtend: 24 h + 48 h is 72 h in all, allowed; 1 h more, denied.
		expect("an extension to 72 h", f.call(extend, dave, map[string]any{"id": idOf(r8), "duration": "172800s"}), "ok", "")
		expect("an extension to 73 h", f.call(extend, dave, map[string]any{"id": idOf(r8), "duration": "3600s"}), "permission_denied", "acme/bounded-extend")
		expect("a reservation of 73 h", reserve(1, "duration", "262800s"), "permission_denied", "acme/bounded-extend")

		// Isolation: a pool not offered to acme, and globex's reservation.
		res := reserve(1, "pool", "private")
		expect("a pool not offered", res, "not_found", "not found")
		if strings.Contains(res.msg, "permission") {
			t.Errorf("the answer %q hints at permissions", res.msg)
		}
		other := f.tokenIDs["globex/reservation"]
		expect("get globex's reservation", f.call(get, dave, map[string]any{"id": other}), "not_found", "not found")
		expect("extend globex's reservation", f.call(extend, dave, map[string]any{"id": other, "duration": "3600s"}), "not_found", "not found")
		expect("release globex's reservation", f.call(release, dave, map[string]any{"id": other}), "not_found", "not found")
		expect("reserve for globex", reserve(1, "tenant", "globex"), "not_found", "not found")
		expect("get acme's own", f.call(get, dave, map[string]any{"id": idOf(r8)}), "ok", "")
	})
}

// TestExtendReservationEnd: an extension only moves the end later. An
// until at or before the current end (even in the past) or a duration that
// is not positive is refused and the end stays; a later until sets the end,
// and a duration is added to the current end, not counted from now.
func TestExtendReservationEnd(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		alice, id := f.tokens["acme/alice"], f.tokenIDs["acme/reservation"]
		endOf := func() time.Time {
			t.Helper()
			r, err := f.store.GetReservation(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			return r.EndsAt
		}
		extend := func(kv ...any) result {
			t.Helper()
			req := map[string]any{"id": id}
			for i := 0; i < len(kv); i += 2 {
				req[kv[i].(string)] = kv[i+1]
			}
			return f.call("/bettercompute.api.v1.ReservationService/ExtendReservation", alice, req)
		}
		stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

		end := endOf()
		for _, c := range []struct {
			what string
			req  []any
			msg  string
		}{
			{"until in the past", []any{"until", "2001-01-01T00:00:00Z"},
				"until 2001-01-01T00:00:00Z is not after the reservation's end " + stamp(end) + ": extend only moves the end later; release it to end it sooner"},
			{"until at the end", []any{"until", stamp(end)},
				"until " + stamp(end) + " is not after the reservation's end " + stamp(end) + ": extend only moves the end later; release it to end it sooner"},
			{"until before the end, still ahead", []any{"until", stamp(end.Add(-30 * time.Minute))}, "is not after the reservation's end"},
			{"a zero duration", []any{"duration", "0s"}, "duration 0s is not positive"},
			{"a negative duration", []any{"duration", "-3600s"}, "duration -1h0m0s is not positive"},
		} {
			res := extend(c.req...)
			if res.code != "invalid_argument" || !strings.Contains(res.msg, c.msg) {
				t.Errorf("%s: %s %q, want invalid_argument with %q", c.what, res.code, res.msg, c.msg)
			}
			if got := endOf(); !got.Equal(end) {
				t.Errorf("%s: the end moved from %s to %s", c.what, end, got)
			}
		}
		if e := f.lastAudit(); e.Action != "compute:reservations:extend" || e.Reason != "failed: invalid_argument" {
			t.Errorf("last audit event %+v, want the refused extension", e)
		}

		if res := extend("duration", "3600s"); res.code != "ok" {
			t.Fatalf("a one-hour extension: %s %q", res.code, res.msg)
		}
		if got, want := endOf(), end.Add(time.Hour); !got.Equal(want) {
			t.Errorf("after a one-hour extension the end is %s, want %s: the current end plus an hour", got, want)
		}
		want := end.Add(3 * time.Hour)
		if res := extend("until", stamp(want)); res.code != "ok" {
			t.Fatalf("until three hours past the old end: %s %q", res.code, res.msg)
		}
		if got := endOf(); !got.Equal(want) {
			t.Errorf("after an until the end is %s, want %s", got, want)
		}
	})
}
