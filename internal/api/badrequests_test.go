package api_test

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestBadRequestsThroughTheAPI: on both engines, a NUL byte the engines
// would take differently (SQLite keeps it, PostgreSQL's text refuses it)
// is invalid_argument before any store read, and a refused mutation is
// audited; a compressed request that would inflate past the limit is
// refused before the authorizer without a token, and without the server
// allocating what it would inflate to.
func TestBadRequestsThroughTheAPI(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		alice := f.tokens["acme/alice"]
		for _, tt := range []struct {
			procedure string
			req       map[string]any
		}{
			{"/bettercompute.api.v1.GroupService/GetGroup", map[string]any{"tenant": "acme", "name": "ops\x00"}},
			{"/bettercompute.api.v1.UserService/UpdateUser", map[string]any{"tenant": "acme", "name": "alice", "displayName": "A\x00"}},
			{"/bettercompute.api.v1.GroupService/DeleteGroup", map[string]any{"tenant": "acme", "name": "a\x00"}},
		} {
			res := f.call(tt.procedure, alice, tt.req)
			if res.code != "invalid_argument" || !strings.Contains(res.msg, "holds a NUL byte: remove it") {
				t.Errorf("%s: %s %q, want invalid_argument naming the NUL", tt.procedure, res.code, res.msg)
			}
		}
		if e := f.lastAudit(); e.Decision != "deny" || e.Action != "compute:groups:delete" || !strings.Contains(e.Reason, "invalid_argument") {
			t.Errorf("the refused DeleteGroup's audit event = %+v, want a deny for invalid input", e)
		}
		// An empty id on a mutation is refused, and audited too.
		if res := f.call("/bettercompute.api.v1.GroupService/DeleteGroup", alice, map[string]any{"tenant": "acme"}); res.code != "invalid_argument" {
			t.Errorf("DeleteGroup without a name: %s %q", res.code, res.msg)
		}
		if e := f.lastAudit(); e.Action != "compute:groups:delete" || !strings.Contains(e.Reason, "invalid_argument") {
			t.Errorf("DeleteGroup without a name left the audit event %+v", e)
		}

		// 200 MB of JSON in 200 KB of gzip, with no token.
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		_, _ = w.Write([]byte(`{"tenant":"`))
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for range 200 {
			_, _ = w.Write(chunk)
		}
		_, _ = w.Write([]byte(`"}`))
		_ = w.Close()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		hr, _ := http.NewRequest(http.MethodPost, f.url+"/bettercompute.api.v1.GroupService/GetGroup", &gz)
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Content-Encoding", "gzip")
		res, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if res.StatusCode == http.StatusOK || res.StatusCode == http.StatusUnauthorized {
			t.Errorf("a request inflating to 200 MB: HTTP %d, want it refused for its size", res.StatusCode)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("the server allocated %d MiB for a refused request", grew>>20)
		}
	})
}
