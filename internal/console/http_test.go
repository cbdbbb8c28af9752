package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// TestSessionHTTP checks, without a browser, what a browser relies on: the
// session cookie's flags, the CSRF check on every form post, the redirect
// of an unknown token to sign-in, and that the console shadows none of the
// server's other paths.
func TestSessionHTTP(t *testing.T) {
	st := startStack(t)
	hc := httpClient(t)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := hc.Get(st.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	post := func(path string, form url.Values) (*http.Response, string) {
		t.Helper()
		res, err := hc.PostForm(st.url+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}

	// Signed out, every page leads to sign-in.
	if res, _ := get("/nodes"); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/sign-in" {
		t.Fatalf("GET /nodes signed out: %d to %q, want 303 to /sign-in", res.StatusCode, res.Header.Get("Location"))
	}
	// The server's own paths are not the console's.
	if res, body := get("/healthz"); res.StatusCode != http.StatusOK || strings.Contains(body, "<html") {
		t.Errorf("GET /healthz: %d %q; the console must not shadow it", res.StatusCode, body)
	}
	if res, _ := get("/v1/nope"); res.StatusCode == http.StatusSeeOther {
		t.Error("GET /v1/nope went to the console; /v1/ is the API's")
	}

	// Login CSRF: a sign-in post without the form's token (a page of
	// another site signing the victim in as the attacker) signs nobody in.
	signInCSRF := func() string {
		t.Helper()
		_, body := get("/sign-in")
		m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
		if m == nil {
			t.Fatal("the sign-in form has no CSRF field")
		}
		return m[1]
	}
	if res, body := post("/sign-in", url.Values{"token": {st.admin}}); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "did not come from this console") || sessionSet(res) {
		t.Fatalf("sign in without the form's CSRF token: %d, session set %v", res.StatusCode, sessionSet(res))
	}
	// Another browser's form token does not fit this browser's cookie.
	other := httpClient(t)
	ores, err := other.Get(st.url + "/sign-in")
	if err != nil {
		t.Fatal(err)
	}
	ob, _ := io.ReadAll(ores.Body)
	ores.Body.Close()
	foreign := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(string(ob))[1]
	signInCSRF() // this browser now has a sign-in cookie of its own
	if res, _ := post("/sign-in", url.Values{"token": {st.admin}, "csrf": {foreign}}); res.StatusCode != http.StatusForbidden || sessionSet(res) {
		t.Fatalf("sign in with another browser's form token: %d, session set %v", res.StatusCode, sessionSet(res))
	}

	// A token the API refuses is refused with the API's reason.
	res, body := post("/sign-in", url.Values{"token": {"bc_nope_nope"}, "csrf": {signInCSRF()}})
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "The API refused this token") {
		t.Fatalf("sign in with a bad token: %d, page %q", res.StatusCode, body)
	}
	if sessionSet(res) {
		t.Errorf("a refused sign-in set the session: %v", res.Cookies())
	}

	res, _ = post("/sign-in", url.Values{"token": {st.admin}, "csrf": {signInCSRF()}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Fatalf("sign in as admin: %d to %q, want 303 to /", res.StatusCode, res.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "bc_session" {
			session = c
		}
	}
	if session == nil || session.Value != st.admin || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" || session.Secure {
		t.Fatalf("session cookie %+v: want the token, HttpOnly, SameSite=Strict, Path=/, not Secure on plain HTTP", session)
	}

	res, body = get("/reservations")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /reservations signed in: %d", res.StatusCode)
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("the reservations page has no CSRF field")
	}
	form := url.Values{"pool": {"platform/default"}, "gpus": {"1"}, "hours": {"1"}}
	// Without the CSRF token, or with another, the post changes nothing.
	for _, csrf := range []string{"", strings.Repeat("0", len(m[1]))} {
		form.Set("csrf", csrf)
		if res, _ := post("/reservations", form); res.StatusCode != http.StatusForbidden {
			t.Errorf("a reservation posted with CSRF token %q: %d, want 403", csrf, res.StatusCode)
		}
	}
	if res, _ := post("/sign-out", url.Values{"csrf": {"x"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("sign-out with a forged CSRF token: %d, want 403", res.StatusCode)
	}
	list, err := st.api.Reservations.ListReservations(t.Context(), connectReq())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Msg.GetReservations()); n != 0 {
		t.Fatalf("forged posts made %d reservations", n)
	}
	// With it, the post reserves and redirects (post, redirect, get).
	form.Set("csrf", m[1])
	if res, body := post("/reservations", form); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a reservation posted with the CSRF token: %d %s", res.StatusCode, body)
	}
	if _, body := get("/reservations"); !strings.Contains(body, "Reserved 1 GPUs as ") {
		t.Error("the reservations page after reserving does not say so")
	}

	// Signing out clears the cookie; the pages lead to sign-in again.
	if res, _ := post("/sign-out", url.Values{"csrf": {m[1]}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", res.StatusCode)
	}
	if res, _ := get("/"); res.Header.Get("Location") != "/sign-in" {
		t.Errorf("after signing out, / leads to %q", res.Header.Get("Location"))
	}

	// A cookie whose token the API no longer knows ends at sign-in, with a
	// message.
	u, _ := url.Parse(st.url)
	hc.Jar.SetCookies(u, []*http.Cookie{{Name: "bc_session", Value: "bc_unknown_token", Path: "/"}})
	res, _ = get("/nodes")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/sign-in?why=expired" {
		t.Fatalf("GET /nodes with an unknown token: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	if _, body := get("/sign-in?why=expired"); !strings.Contains(body, "Your session ended") {
		t.Error("the sign-in page does not say why the session ended")
	}
}

// sessionSet reports whether res sets a session cookie.
func sessionSet(res *http.Response) bool {
	for _, c := range res.Cookies() {
		if c.Name == "bc_session" && c.Value != "" {
			return true
		}
	}
	return false
}

// TestPageLinks: links that carry a page's filters keep them: html/template
// escapes a value placed inside a URL's query as one opaque value (days=90
// became days%3d90, and the CSV export fell back to 7 days), so such links
// are built whole in Go.
func TestPageLinks(t *testing.T) {
	st := startStack(t)
	w := signedIn(t, st, st.admin)
	_, body := w.get("/usage?days=90&all=on")
	if !strings.Contains(body, `href="/usage.csv?all=on&amp;days=90"`) {
		t.Errorf("the usage page's CSV link does not carry its filters:\n%s", regexp.MustCompile(`<a [^>]*usage-csv[^>]*>`).FindString(body))
	}
	res, csv := w.get("/usage.csv?all=on&days=90")
	if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Disposition"), "90d") {
		t.Errorf("the CSV for 90 days: %d, %q (%d bytes)", res.StatusCode, res.Header.Get("Content-Disposition"), len(csv))
	}
	// Over 100 audit events, so that the audit page has an older page.
	for i := range 101 {
		req := connect.NewRequest(&apiv1.CreateGroupRequest{Tenant: "demo", Name: fmt.Sprintf("links-%03d", i)})
		if _, err := st.api.Groups.CreateGroup(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	_, body = w.get("/audit?hours=1&all=on")
	link := regexp.MustCompile(`<a href="([^"]*)" id="audit-older">`).FindStringSubmatch(body)
	if link == nil || !strings.Contains(link[1], "hours=1") || !strings.Contains(link[1], "page=") || strings.Contains(link[1], "%3d") {
		t.Errorf("the audit page's older-events link = %v, want /audit?hours=1&page=...", link)
	}
}
