package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/agent"
	"github.com/better-compute/better-compute/internal/devstack"
)

// browser is one headless Chromium for a test; each user gets a tab in a
// browser context of its own, so cookies never cross between users.
type browser struct {
	t    *testing.T
	root context.Context
	url  string
}

// newBrowser starts Debian's chromium. Without it the test skips, unless
// BETTER_COMPUTE_REQUIRE_BROWSER=1 (as in CI), where it fails.
func newBrowser(t *testing.T, url string) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("BETTER_COMPUTE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("BETTER_COMPUTE_REQUIRE_BROWSER=1 but there is no chromium on PATH (%v): apt-get install chromium", err)
		}
		t.Skipf("no chromium on PATH (%v): install it (apt-get install chromium) to run the browser tests; CI sets BETTER_COMPUTE_REQUIRE_BROWSER=1 to require them", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-features", "RenderDocument,ProactivelySwapBrowsingInstance,BackForwardCache"), chromedp.Flag("disable-site-isolation-trials", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	root, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(root, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, root: root, url: url}
}

// user is one person at the console, in their own browser context.
type user struct {
	t   *testing.T
	ctx context.Context
	url string
}

func (b *browser) user(t *testing.T) *user {
	ctx, cancel := chromedp.NewContext(b.root, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	// The first action opens the tab and ties it to its context: run it on
	// ctx itself, not on a context with a timeout, whose end would close it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return &user{t: t, ctx: ctx, url: b.url}
}

// do runs steps, bounded, failing the test on an error.
func (u *user) do(steps ...chromedp.Action[chromedp.Void]) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		u.t.Fatalf("browser: %v", err)
	}
}

func (u *user) open(path string) {
	u.t.Helper()
	u.do(chromedp.Navigate(u.url+path), chromedp.WaitReady(chromedp.CSS("main")))
}

// eval returns a JavaScript expression's value.
func eval[T any](u *user, expr string) T {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		u.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// text is the text of the first element sel matches, "" when none does.
func (u *user) text(sel string) string {
	u.t.Helper()
	return eval[string](u, fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel))
}

// waitFor waits until the JavaScript predicate holds, up to d. It asks
// again and again rather than polling in the page, because a form post or
// a redirect replaces the page (and its JavaScript context) meanwhile.
func (u *user) waitFor(what, predicate string, d time.Duration) {
	u.t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(u.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](predicate))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	u.t.Fatalf("waiting for %s: not within %v (last error %v; page %s: %q)", what, d, last, eval[string](u, "location.pathname"), u.text("main"))
}

// signIn signs in with token through the form, and lands on the overview.
func (u *user) signIn(token string) {
	u.t.Helper()
	u.open("/sign-in")
	u.do(chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS(`form[action="/sign-in"] button`)))
	u.waitFor("the overview", `location.pathname === "/" && !!document.querySelector("h1") && document.querySelector("h1").innerText === "Overview"`, 20*time.Second)
}

// TestConsoleInBrowser drives the console in Chromium against a dev stack:
// signing in, the nodes, reserving until the node binds, releasing, a
// policy's denial, tenant isolation, a revoked token, the policy editor,
// and a node joining while its list is open.
func TestConsoleInBrowser(t *testing.T) {
	st := startStack(t)
	b := newBrowser(t, st.url)
	demo := st.tenantUser(t, devstack.DemoTenant, "dana")
	rival := st.tenantUser(t, "rival", "rick")

	t.Run("a bad token stays at sign-in", func(t *testing.T) {
		u := b.user(t)
		u.open("/reservations")
		if p := eval[string](u, "location.pathname"); p != "/sign-in" {
			t.Fatalf("signed out, /reservations shows %s, want /sign-in", p)
		}
		// The browser checks the field first: an empty token never posts.
		if eval[bool](u, `document.querySelector("#token").checkValidity()`) {
			t.Error("the empty token field is valid; want required")
		}
		u.do(chromedp.SendKeys(chromedp.CSS("#token"), "bc_nope_nope"), chromedp.Click(chromedp.CSS(`form[action="/sign-in"] button`)))
		u.waitFor("the refusal", `!!document.querySelector("#sign-in-error")`, 10*time.Second)
		if msg := u.text("#sign-in-error"); !strings.Contains(msg, "The API refused this token") {
			t.Errorf("sign-in error %q", msg)
		}
	})

	t.Run("the admin sees nodes", func(t *testing.T) {
		u := b.user(t)
		u.signIn(st.admin)
		if got := u.text("#nodes-ready"); got != fmt.Sprint(st.nodes) {
			t.Errorf("overview: %q nodes ready, want %d", got, st.nodes)
		}
		if got := u.text("#who-tenant"); got != "platform" {
			t.Errorf("the header names tenant %q, want platform", got)
		}
		if n := eval[int](u, `document.querySelectorAll("svg.chart").length`); n != 1 {
			t.Errorf("overview has %d charts, want 1", n)
		}
		// Keyboard: the nav is reachable and its links are focusable.
		u.do(chromedp.Focus(chromedp.CSS(`nav a[href="/nodes"]`)))
		if got := eval[string](u, `document.activeElement.getAttribute("href")`); got != "/nodes" {
			t.Errorf("focused %q, want the Nodes link", got)
		}
		u.do(chromedp.Click(chromedp.CSS(`nav a[href="/nodes"]`)))
		u.waitFor("the node list", `location.pathname === "/nodes" && !!document.querySelector("#nodes")`, 10*time.Second)
		if n := eval[int](u, `document.querySelectorAll("#nodes tbody tr").length`); n != st.nodes {
			t.Errorf("%d nodes listed, want %d", n, st.nodes)
		}
		// Filters: a state no node is in, and a label every node has.
		u.open("/nodes?state=unreachable")
		if n := eval[int](u, `document.querySelectorAll("#nodes tbody tr").length`); n != 0 {
			t.Errorf("%d unreachable nodes listed, want 0", n)
		}
		u.open("/nodes?label=" + fmt.Sprintf("gpu.count%%3D%d", st.gpus))
		if n := eval[int](u, `document.querySelectorAll("#nodes tbody tr").length`); n != st.nodes {
			t.Errorf("gpu.count=%d: %d nodes listed, want %d", st.gpus, n, st.nodes)
		}
		u.open("/nodes?label=simulated%3Dfalse")
		if n := eval[int](u, `document.querySelectorAll("#nodes tbody tr").length`); n != 0 {
			t.Errorf("simulated=false: %d nodes listed, want 0", n)
		}
		u.open("/nodes")
		u.do(chromedp.Click(chromedp.CSS(`#nodes tbody tr a`)))
		u.waitFor("a node page", `!!document.querySelector("#gpus")`, 10*time.Second)
		if n := eval[int](u, `document.querySelectorAll("#gpus tbody tr").length`); n != st.gpus {
			t.Errorf("the node page lists %d GPUs, want %d", n, st.gpus)
		}
		if got := u.text("#node-state"); got != "ready" {
			t.Errorf("node state %q, want ready", got)
		}
	})

	t.Run("reserve, see it bound without reloading, release", func(t *testing.T) {
		u := b.user(t)
		u.signIn(demo)
		u.open("/reservations")
		u.do(chromedp.SetValue(chromedp.CSS("#r-gpus"), "2"), chromedp.SetValue(chromedp.CSS("#r-hours"), "2"),
			chromedp.Click(chromedp.CSS("#reserve")))
		u.waitFor("the new reservation", `!!document.querySelector("#reservations tbody tr") && /Reserved 2 GPUs as /.test(document.querySelector("#flash").innerText)`, 20*time.Second)
		id := eval[string](u, `document.querySelector("#reservations tbody tr").dataset.reservation`)
		if id == "" {
			t.Fatal("no reservation row")
		}
		// The page follows the reservation to bound by itself: the marker
		// set now would not survive a reload.
		eval[bool](u, `window.__noReload = true`)
		u.waitFor("the reservation bound", fmt.Sprintf(`(document.getElementById(%q) || {dataset: {}}).dataset.state === "bound"`, id), 45*time.Second)
		if !eval[bool](u, `window.__noReload === true`) {
			t.Error("the page reloaded to show the bound reservation")
		}
		// The admin sees which GPUs of which node it holds.
		res, err := st.api.Reservations.GetReservation(t.Context(), connect.NewRequest(&apiv1.GetReservationRequest{Tenant: devstack.DemoTenant, Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		admin := b.user(t)
		admin.signIn(st.admin)
		admin.open("/nodes/" + res.Msg.GetReservation().GetNodeIds()[0])
		if n := eval[int](admin, fmt.Sprintf(`Array.from(document.querySelectorAll("#gpus tbody tr")).filter(r => r.innerText.includes(%q)).length`, id)); n != 2 {
			t.Errorf("the node page shows %d GPUs held by %s, want 2", n, id)
		}

		u.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`form[action="/reservations/%s/release"] button`, id))))
		u.waitFor("the release", fmt.Sprintf(`(document.getElementById(%q) || {dataset: {}}).dataset.state === "released"`, id), 20*time.Second)
		if !strings.Contains(u.text("#flash"), "Released "+id) {
			t.Errorf("after releasing, the page says %q", u.text("#flash"))
		}
	})

	t.Run("a denial shows the API's message", func(t *testing.T) {
		u := b.user(t)
		u.signIn(demo)
		u.open("/reservations")
		// The browser refuses what the API would, before posting.
		u.do(chromedp.SetValue(chromedp.CSS("#r-gpus"), "0"))
		if eval[bool](u, `document.querySelector("#r-gpus").checkValidity()`) {
			t.Error("0 GPUs passes the browser's check")
		}
		// What the API says to the same request, word for word.
		_, apiErr := newClient(t, st.url, demo).Reservations.CreateReservation(t.Context(), connect.NewRequest(&apiv1.CreateReservationRequest{
			PoolTenant: "platform", Pool: devstack.DefaultPool, Gpus: maxDemoGPUs + 1,
			End: &apiv1.CreateReservationRequest_Duration{Duration: durationpb.New(time.Hour)},
		}))
		var ce *connect.Error
		if apiErr == nil || connect.CodeOf(apiErr) != connect.CodePermissionDenied {
			t.Fatalf("the API allowed %d GPUs: %v", maxDemoGPUs+1, apiErr)
		}
		ce = apiErr.(*connect.Error)
		u.do(chromedp.SetValue(chromedp.CSS("#r-gpus"), fmt.Sprint(maxDemoGPUs+1)), chromedp.Click(chromedp.CSS("#reserve")))
		u.waitFor("the denial", `!!document.querySelector("#form-error")`, 20*time.Second)
		if got := u.text("#form-error"); got != ce.Message() {
			t.Errorf("the page says %q, the API %q", got, ce.Message())
		}
		if !strings.Contains(ce.Message(), "reserve-bounded") {
			t.Errorf("the API's denial %q does not name the policy", ce.Message())
		}
		// The form keeps what was asked, to correct it.
		if got := eval[string](u, `document.querySelector("#r-gpus").value`); got != fmt.Sprint(maxDemoGPUs+1) {
			t.Errorf("the form forgot the GPUs asked: %q", got)
		}
	})

	t.Run("a tenant sees none of another tenant's objects", func(t *testing.T) {
		res, err := newClient(t, st.url, rival).Reservations.CreateReservation(t.Context(), connect.NewRequest(&apiv1.CreateReservationRequest{
			PoolTenant: "platform", Pool: devstack.DefaultPool, Gpus: 1,
			End: &apiv1.CreateReservationRequest_Duration{Duration: durationpb.New(time.Hour)},
		}))
		if err != nil {
			t.Fatal(err)
		}
		rid := res.Msg.GetReservation().GetId()
		node := res.Msg.GetReservation().GetNodeIds()[0]
		u := b.user(t)
		u.signIn(demo)
		if got := u.text("#who-tenant"); got != devstack.DemoTenant {
			t.Errorf("the header names tenant %q, want %s", got, devstack.DemoTenant)
		}
		for _, path := range []string{"/", "/reservations", "/nodes", "/usage", "/audit", "/pools"} {
			u.open(path)
			if body := u.text("body"); strings.Contains(body, rid) || strings.Contains(body, "rival") {
				t.Errorf("%s shows the rival tenant's objects: %q", path, body)
			}
		}
		u.open("/nodes/" + node)
		if msg := u.text("#error-message"); !strings.Contains(msg, "not found") {
			t.Errorf("another tenant's node page says %q, want not found", msg)
		}
		// The rival's own console shows it.
		r := b.user(t)
		r.signIn(rival)
		r.open("/reservations")
		if !strings.Contains(r.text("#reservations"), rid) {
			t.Errorf("the rival's reservations page lacks its reservation %s", rid)
		}
	})

	t.Run("a revoked token leads to sign-in", func(t *testing.T) {
		tok := st.tenantUser(t, devstack.DemoTenant, "dora")
		u := b.user(t)
		u.signIn(tok)
		id := strings.Split(tok, "_")[1]
		if _, err := st.api.Tokens.RevokeToken(t.Context(), connect.NewRequest(&apiv1.RevokeTokenRequest{Tenant: devstack.DemoTenant, Id: id})); err != nil {
			t.Fatal(err)
		}
		u.open("/reservations")
		if p := eval[string](u, "location.pathname"); p != "/sign-in" {
			t.Fatalf("with a revoked token, /reservations shows %s", p)
		}
		if msg := u.text("#sign-in-error"); !strings.Contains(msg, "Your session ended") {
			t.Errorf("sign-in says %q", msg)
		}
	})

	t.Run("the admin fixes a policy the API refused, at its line", func(t *testing.T) {
		u := b.user(t)
		u.signIn(st.admin)
		u.do(chromedp.Click(chromedp.CSS(`nav a[href="/policies"]`)))
		u.waitFor("the policies page", `location.pathname === "/policies" && !!document.querySelector("#new-policy")`, 10*time.Second)
		u.do(chromedp.Click(chromedp.CSS("#new-policy")))
		u.waitFor("the editor", `!!document.querySelector("#p-body")`, 10*time.Second)
		broken := "// Staff may list users.\npermit (\n  principal,\n  action == Action::\"compute:users:list\"\n  resource\n);"
		u.do(chromedp.SendKeys(chromedp.CSS("#p-name"), "staff-read"), chromedp.SetValue(chromedp.CSS("#p-body"), broken),
			chromedp.Click(chromedp.CSS("#save-policy")))
		u.waitFor("the problem at its line", `!!document.querySelector("#problem-line")`, 10*time.Second)
		if got := eval[string](u, `document.querySelector("#problem-line").dataset.line`); got != "5" {
			t.Errorf("the problem is marked at line %s, want 5", got)
		}
		if msg := u.text("#problem-line .problem"); !strings.HasPrefix(msg, "line 5") {
			t.Errorf("the message next to the line says %q", msg)
		}
		// The editor keeps the document, and selects the offending line.
		if got := eval[string](u, `document.querySelector("#p-body").value`); got != broken {
			t.Errorf("the editor holds %q, want what was typed", got)
		}
		if got := eval[string](u, `(function (t) { return t.value.substring(t.selectionStart, t.selectionEnd); })(document.querySelector("#p-body"))`); got != "  resource" {
			t.Errorf("the editor selects %q, want line 5", got)
		}
		fixed := strings.Replace(broken, "\"compute:users:list\"", "\"compute:users:list\",", 1)
		u.do(chromedp.SetValue(chromedp.CSS("#p-body"), fixed), chromedp.Click(chromedp.CSS("#save-policy")))
		u.waitFor("the saved policy", `/Saved policy staff-read/.test(document.querySelector("#flash").innerText)`, 10*time.Second)
		if u.text("#problem-line") != "" {
			t.Error("the saved policy still shows a problem")
		}
		p, err := st.api.Policies.GetPolicy(t.Context(), connect.NewRequest(&apiv1.GetPolicyRequest{Name: "staff-read"}))
		if err != nil || p.Msg.GetPolicy().GetBody() != fixed {
			t.Errorf("stored: %v, %v; want the fixed document", p, err)
		}
	})

	// Last: it adds a node to the stack.
	t.Run("a node joins while the list is open", func(t *testing.T) {
		u := b.user(t)
		u.signIn(st.admin)
		u.open("/nodes")
		eval[bool](u, `window.__noReload = true`)
		tok, err := st.api.JoinTokens.CreateJoinToken(t.Context(), connect.NewRequest(&apiv1.CreateJoinTokenRequest{
			Pool: devstack.DefaultPool, MaxUses: 1, Ttl: durationpb.New(10 * time.Minute), Description: "the browser test's late node",
		}))
		if err != nil {
			t.Fatal(err)
		}
		// A real agent (bcd's own code, on fake GPUs) joins over mTLS.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- agent.RunSim(ctx, agent.SimConfig{Nodes: 1, Server: st.gateway, Token: tok.Msg.GetSecret(), DataDir: t.TempDir(), GPUs: 2})
		}()
		t.Cleanup(func() { cancel(); <-done })
		u.waitFor("the new node in the list", fmt.Sprintf(`document.querySelectorAll("#nodes tbody tr").length === %d`, st.nodes+1), 60*time.Second)
		u.waitFor("the new node ready", `Array.from(document.querySelectorAll("#nodes tbody tr")).every(r => /ready/.test(r.innerText))`, 60*time.Second)
		if !eval[bool](u, `window.__noReload === true`) {
			t.Error("the page reloaded to show the new node")
		}
	})

	if os.Getenv("BETTER_COMPUTE_SCREENSHOTS") == "1" {
		t.Run("screenshots", func(t *testing.T) { screenshots(t, b, st) })
	}
}

// screenshots saves the main pages as PNG under docs/images/, for the
// docs: BETTER_COMPUTE_SCREENSHOTS=1 go test -run TestConsoleInBrowser ./internal/console/
func screenshots(t *testing.T, b *browser, st *stack) {
	dir := filepath.Join("..", "..", "docs", "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	demo := st.tenantUser(t, devstack.DemoTenant, "dana")
	if _, err := newClient(t, st.url, demo).Reservations.CreateReservation(t.Context(), connect.NewRequest(&apiv1.CreateReservationRequest{
		PoolTenant: "platform", Pool: devstack.DefaultPool, Gpus: 3,
		End: &apiv1.CreateReservationRequest_Duration{Duration: durationpb.New(8 * time.Hour)},
	})); err != nil {
		t.Fatal(err)
	}
	u := b.user(t)
	u.signIn(st.admin)
	nodes, err := st.api.Nodes.ListNodes(t.Context(), connect.NewRequest(&apiv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"console-overview": "/", "console-nodes": "/nodes", "console-node": "/nodes/" + nodes.Msg.GetNodes()[0].GetId(),
		"console-reservations": "/reservations", "console-usage": "/usage?all=on", "console-pools": "/pools",
	} {
		u.open(path)
		ctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The policy editor showing a problem at its line.
	u.open("/policies/edit")
	u.do(chromedp.SendKeys(chromedp.CSS("#p-name"), "staff-read"),
		chromedp.SetValue(chromedp.CSS("#p-body"), "// Staff may list users.\npermit (\n  principal in Group::\"platform/staff\",\n  action == Action::\"compute:users:list\"\n  resource\n);"),
		chromedp.Click(chromedp.CSS("#save-policy")))
	u.waitFor("the problem", `!!document.querySelector("#problem-line")`, 10*time.Second)
	ctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-policy.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
