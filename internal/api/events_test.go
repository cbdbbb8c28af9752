package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/api"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

const listEvents = "/bettercompute.api.v1.EventService/ListEvents"

// eventsOf returns "type tenant/subject" of a ListEvents answer.
func eventsOf(t *testing.T, res result) []string {
	t.Helper()
	if res.code != "ok" {
		t.Fatalf("ListEvents: %s (%s)", res.code, res.msg)
	}
	var out []string
	evs, _ := res.body["events"].([]any)
	for _, e := range evs {
		e := e.(map[string]any)
		out = append(out, fmt.Sprintf("%s %s/%s", e["type"], e["tenant"], e["subject"]))
	}
	return out
}

// TestListEvents: a tenant's admin lists its own tenant's events, a member
// only the kinds its policies let it list, the platform any tenant's; types
// filter, pages continue where they stopped, bad input is refused.
func TestListEvents(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		ctx := context.Background()
		// carl (acme/staff) gets the pool-users example: reservations and
		// their events, not nodes.
		body, err := iam.ExamplePolicy("pool-users", "acme")
		if err != nil {
			t.Fatal(err)
		}
		body = strings.ReplaceAll(body, `Group::"acme/gpu-users"`, `Group::"acme/staff"`)
		if _, err := f.store.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: "pool-users", Body: body}); err != nil {
			t.Fatal(err)
		}
		carl := f.newToken("acme", "carl", time.Hour)

		all := eventsOf(t, f.call(listEvents, f.tokens["acme/alice"], map[string]any{"pageSize": 1000}))
		for _, want := range []string{"node.joined acme/n-acme-1", "node.revoked acme/n-acme-3", "node.ready acme/n-acme-gpu",
			"reservation.placed acme/" + f.tokenIDs["acme/reservation"], "policy.changed acme/tenant-admins"} {
			if !slices.Contains(all, want) {
				t.Errorf("acme's admin's events lack %q: %q", want, all)
			}
		}
		for _, e := range all {
			if !strings.Contains(e, " acme/") {
				t.Errorf("acme's admin sees %q", e)
			}
		}
		for _, e := range eventsOf(t, f.call(listEvents, carl, map[string]any{"pageSize": 1000})) {
			if !strings.HasPrefix(e, "reservation.") {
				t.Errorf("a pool user sees %q; want reservation events only", e)
			}
		}
		if res := f.call(listEvents, f.tokens["acme/bob"], map[string]any{}); res.code != "permission_denied" {
			t.Errorf("bob without policies: %s (%s), want permission_denied", res.code, res.msg)
		}
		if res := f.call(listEvents, f.tokens["acme/alice"], map[string]any{"tenant": "globex"}); res.code != "not_found" {
			t.Errorf("acme's admin listing globex: %s, want not_found", res.code)
		}
		every := eventsOf(t, f.call(listEvents, f.tokens["platform/admin"], map[string]any{"allTenants": true, "pageSize": 1000}))
		if !slices.Contains(every, "node.joined globex/n-globex-1") || !slices.Contains(every, "node.joined acme/n-acme-1") {
			t.Errorf("the platform's events across tenants lack a tenant: %q", every)
		}

		placed := eventsOf(t, f.call(listEvents, f.tokens["acme/alice"], map[string]any{"types": []string{"reservation.placed"}}))
		if len(placed) != 2 {
			t.Errorf("reservation.placed events = %q, want acme's 2", placed)
		}
		kinds := eventsOf(t, f.call(listEvents, f.tokens["acme/alice"], map[string]any{"types": []string{"node.*", "policy.changed"}, "pageSize": 1000}))
		for _, e := range kinds {
			if !strings.HasPrefix(e, "node.") && !strings.HasPrefix(e, "policy.changed ") {
				t.Errorf("types node.* and policy.changed gave %q", e)
			}
		}

		// Pages of 3 visit every event once.
		var paged []string
		after := "0"
		for range 100 {
			res := f.call(listEvents, f.tokens["acme/alice"], map[string]any{"pageSize": 3, "afterSeq": after})
			page := eventsOf(t, res)
			if len(page) == 0 {
				break
			}
			paged = append(paged, page...)
			after = fmt.Sprint(res.body["nextAfterSeq"])
		}
		if !slices.Equal(paged, all) {
			t.Errorf("pages of 3 gave %d events, one page %d", len(paged), len(all))
		}

		for _, bad := range []map[string]any{{"types": []string{"bogus"}}, {"types": []string{"node"}}, {"afterSeq": "-1"}, {"pageSize": 5000}} {
			if res := f.call(listEvents, f.tokens["acme/alice"], bad); res.code != "invalid_argument" || strings.Contains(res.msg, "\n") {
				t.Errorf("ListEvents(%v) = %s (%q), want invalid_argument in one line", bad, res.code, res.msg)
			}
		}
		// Pruned past the caller's position: it is told to resync.
		if _, err := f.store.PruneEvents(ctx, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		f.reserve("acme", "acme", "main", 1)
		if res := f.call(listEvents, f.tokens["acme/alice"], map[string]any{"afterSeq": "1"}); res.body["resync"] != true {
			t.Errorf("ListEvents after pruning: resync = %v, want true", res.body["resync"])
		}
	})
}

// sseEvent is one message of the stream.
type sseEvent struct {
	id, event string
	data      map[string]any
}

// openStream connects to the event stream with the request's headers and
// query, and returns its messages as they come.
func openStream(t *testing.T, f *fixture, query string, header http.Header) (*http.Response, <-chan sseEvent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url+api.StreamPath+"?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	out := make(chan sseEvent, 100)
	if res.StatusCode != http.StatusOK {
		close(out)
		return res, out
	}
	go func() {
		defer close(out)
		sc := bufio.NewScanner(res.Body)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" {
					out <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				cur.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data)
			}
		}
	}()
	return res, out
}

// next returns the stream's next message, failing after 5 s.
func next(t *testing.T, c <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case e, ok := <-c:
		if !ok {
			t.Fatal("the stream ended")
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return sseEvent{}
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// TestEventStream: the stream catches up from Last-Event-ID, then follows
// live, every event once and in order; a tenant's stream shows none of
// another's; the console's cookie authenticates it; bad credentials and
// input are refused.
func TestEventStream(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		alice := f.tokens["acme/alice"]
		history := eventsOf(t, f.call(listEvents, alice, map[string]any{"pageSize": 1000}))

		// From the start: the history, then a live event after it.
		_, s := openStream(t, f, "after=0", bearer(alice))
		var seen []string
		var ids []int64
		for range history {
			e := next(t, s)
			seen = append(seen, fmt.Sprintf("%s %s/%s", e.event, e.data["tenant"], e.data["subject"]))
			id, _ := strconv.ParseInt(e.id, 10, 64)
			ids = append(ids, id)
		}
		if !slices.Equal(seen, history) {
			t.Fatalf("the stream's catch-up = %q, want ListEvents' %q", seen, history)
		}
		// globex's stream, live from now, and cookie-authenticated.
		_, g := openStream(t, f, "", http.Header{"Cookie": {api.SessionCookie + "=" + f.tokens["globex/carol"]}})
		time.Sleep(100 * time.Millisecond) // the subscription is in place
		acmeID := f.reserve("acme", "acme", "main", 1)
		globexID := f.reserve("globex", "globex", "main", 1)
		live := next(t, s)
		if live.event != "reservation.placed" || live.data["subject"] != acmeID {
			t.Errorf("acme's live event = %+v, want reservation.placed of %s", live, acmeID)
		}
		liveID, _ := strconv.ParseInt(live.id, 10, 64)
		if liveID <= ids[len(ids)-1] {
			t.Errorf("live event %d does not follow the catch-up's last %d", liveID, ids[len(ids)-1])
		}
		if e := next(t, g); e.event != "reservation.placed" || e.data["subject"] != globexID || e.data["tenant"] != "globex" {
			t.Errorf("globex's first live event = %+v, want its own reservation %s (and none of acme's)", e, globexID)
		}

		// Resuming from the middle of the history gives the rest and the
		// live event, no gap and no repeat.
		mid := len(ids) / 2
		_, r := openStream(t, f, "", http.Header{"Authorization": {"Bearer " + alice}, "Last-Event-Id": {fmt.Sprint(ids[mid])}})
		for i := mid + 1; i < len(ids); i++ {
			if e := next(t, r); e.id != fmt.Sprint(ids[i]) {
				t.Fatalf("resumed stream gave id %s, want %d", e.id, ids[i])
			}
		}
		if e := next(t, r); e.id != live.id {
			t.Errorf("resumed stream's next = %s, want the live event %s", e.id, live.id)
		}

		// Refusals, each with its HTTP status.
		for _, tc := range []struct {
			query  string
			header http.Header
			status int
		}{
			{"", http.Header{}, http.StatusUnauthorized},
			{"", bearer("bc_nope"), http.StatusUnauthorized},
			{"", bearer(f.tokens["acme/bob"]), http.StatusForbidden},
			{"tenant=globex", bearer(alice), http.StatusNotFound},
			{"all_tenants=true", bearer(alice), http.StatusForbidden},
			{"types=bogus", bearer(alice), http.StatusBadRequest},
			{"after=x", bearer(alice), http.StatusBadRequest},
		} {
			res, _ := openStream(t, f, tc.query, tc.header)
			if res.StatusCode != tc.status {
				t.Errorf("stream ?%s with %v: HTTP %d, want %d", tc.query, tc.header, res.StatusCode, tc.status)
			}
		}

		// A position older than what was pruned: resync, not a silent gap.
		if _, err := f.store.PruneEvents(context.Background(), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		f.reserve("acme", "acme", "main", 1)
		_, p := openStream(t, f, "after=1", bearer(alice))
		if e := next(t, p); e.event != "resync" {
			t.Errorf("stream from a pruned seq began with %+v, want resync", e)
		}
	})
}
