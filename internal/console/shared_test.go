package console_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/better-compute/better-compute/internal/console"
)

// TestConsolesShareForms: two processes serving the console over one store
// (here two consoles over one API) with the same CSRF key, as serve derives
// it from the shared key file: signing in on one and posting a form to the
// other works. A console with another key refuses that form.
func TestConsolesShareForms(t *testing.T) {
	st := startStack(t)
	target, err := url.Parse(st.url)
	if err != nil {
		t.Fatal(err)
	}
	api := httputil.NewSingleHostReverseProxy(target)
	serve := func(key []byte) string {
		mux := http.NewServeMux()
		if err := console.Mount(mux, console.Config{API: api, CSRFKey: key}); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	shared := bytes.Repeat([]byte{7}, 32)
	a, b, other := serve(shared), serve(shared), serve(bytes.Repeat([]byte{9}, 32))

	w := signedIn(t, &stack{url: a}, st.admin) // the form tokens come from a
	// Cookies are per host, not port: the session goes to b and other too.
	w.url = b
	if res, body := w.post("/groups", url.Values{"tenant": {"demo"}, "name": {"shared-csrf"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a form from one console posted to the other: %d %s", res.StatusCode, body)
	}
	w.url = other
	if res, _ := w.post("/groups", url.Values{"tenant": {"demo"}, "name": {"other-csrf"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("a form posted to a console with another key: %d, want 403", res.StatusCode)
	}
}
