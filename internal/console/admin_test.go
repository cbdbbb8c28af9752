package console_test

import (
	"html/template"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// web is one signed-in browser, without a browser: a cookie jar and the
// page's CSRF token.
type web struct {
	t    *testing.T
	url  string
	hc   *http.Client
	csrf string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func signedIn(t *testing.T, st *stack, token string) *web {
	t.Helper()
	w := &web{t: t, url: st.url, hc: httpClient(t)}
	_, body := w.get("/sign-in")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("the sign-in form has no CSRF field")
	}
	if res, body := w.post("/sign-in", url.Values{"token": {token}, "csrf": {m[1]}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", res.StatusCode, body)
	}
	_, body = w.get("/")
	if m = csrfField.FindStringSubmatch(body); m == nil {
		t.Fatal("the overview has no CSRF field")
	}
	w.csrf = m[1]
	return w
}

func (w *web) get(path string) (*http.Response, string) {
	w.t.Helper()
	res, err := w.hc.Get(w.url + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// post sends a form with the session's CSRF token.
func (w *web) post(path string, form url.Values) (*http.Response, string) {
	w.t.Helper()
	if w.csrf != "" {
		form.Set("csrf", w.csrf)
	}
	res, err := w.hc.PostForm(w.url+path, form)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestAdminHTTP: the admin pages are offered to whom the API permits them,
// and each form does what the CLI would: policies validated with the
// problem at its line, principals, tokens shown once, groups, tenants.
func TestAdminHTTP(t *testing.T) {
	st := startStack(t)
	admin := signedIn(t, st, st.admin)

	// The nav: the platform admin gets every admin page; a user no policy
	// grants anything gets none, and no denial lands in the audit log.
	_, body := admin.get("/")
	for _, href := range []string{"/tenants", "/principals", "/groups", "/policies"} {
		if !strings.Contains(body, `<a href="`+href+`"`) {
			t.Errorf("the platform admin's nav lacks %s", href)
		}
	}
	if !strings.Contains(body, `User::&#34;platform/admin&#34;`) {
		t.Error("the header does not name the signed-in principal")
	}
	ctx := t.Context()
	mustOK := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustOK(st.api.Tenants.CreateTenant(ctx, connect.NewRequest(&apiv1.CreateTenantRequest{Name: "acme"})))
	mustOK(st.api.Users.CreateUser(ctx, connect.NewRequest(&apiv1.CreateUserRequest{Tenant: "acme", Name: "nobody"})))
	tok, err := st.api.Tokens.CreateToken(ctx, connect.NewRequest(&apiv1.CreateTokenRequest{Tenant: "acme", Principal: "nobody", Ttl: durationHour()}))
	if err != nil {
		t.Fatal(err)
	}
	nobody := signedIn(t, st, tok.Msg.GetSecret())
	_, body = nobody.get("/")
	for _, href := range []string{"/tenants", "/principals", "/groups", "/policies"} {
		if strings.Contains(body, `<a href="`+href+`"`) {
			t.Errorf("a principal without policies is offered %s", href)
		}
	}
	audit, err := st.api.Audit.ListAuditEvents(ctx, connect.NewRequest(&apiv1.ListAuditEventsRequest{Tenant: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	// Neither the nav nor the overview's lists leave a denial: the console
	// asks WhoAmI first and reads only what it may.
	for _, e := range audit.Msg.GetEvents() {
		if e.GetDecision() == "deny" && e.GetPrincipal() == `User::"acme/nobody"` {
			t.Errorf("viewing the overview left a denial: %v", e)
		}
	}
	if !strings.Contains(body, "Nodes are not shown: your policies do not permit compute:nodes:list in tenant acme") {
		t.Error("the overview does not say why nodes are not shown")
	}
	// Typing the address still asks the API, which refuses.
	if res, body := nobody.get("/policies"); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "may not compute:policies:list") {
		t.Errorf("GET /policies without permission: %d", res.StatusCode)
	}

	// Policies: a syntax error comes back at its line, with the body kept.
	bad := "// Staff list users.\npermit (\n  principal in Group::\"acme/staff\",\n  action == Action::\"compute:users:list\"\n  resource\n);\n"
	res, body := admin.post("/policies/edit", url.Values{"tenant": {"acme"}, "name": {"staff-read"}, "body": {bad}})
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("saving a broken policy: %d", res.StatusCode)
	}
	m := regexp.MustCompile(`(?s)<li value="(\d+)" class="bad" id="problem-line" data-line="\d+"><code>([^<]*)</code><span class="problem" role="note">(line \d+[^<]*)</span>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the broken policy's page marks no line:\n%s", body)
	}
	if m[1] != "5" || !strings.Contains(m[2], "resource") || !strings.HasPrefix(m[3], "line 5") {
		t.Errorf("the problem is shown at line %s (%q): %q; want line 5, the line after the missing comma", m[1], m[2], m[3])
	}
	v, err := st.api.Policies.ValidatePolicy(ctx, connect.NewRequest(&apiv1.ValidatePolicyRequest{Tenant: "acme", Body: bad}))
	if err != nil || len(v.Msg.GetProblems()) == 0 || !strings.Contains(m[3], htmlEscape(v.Msg.GetProblems()[0].GetMessage())) {
		t.Errorf("the page says %q; the API %v (%v)", m[3], v.Msg.GetProblems(), err)
	}
	if !strings.Contains(body, `aria-invalid="true"`) || !strings.Contains(body, "staff-read") || !strings.Contains(body, htmlEscape(`principal in Group::"acme/staff",`)) {
		t.Error("the editor lost the name or the body, or is not marked invalid")
	}
	if _, err := st.api.Policies.GetPolicy(ctx, connect.NewRequest(&apiv1.GetPolicyRequest{Tenant: "acme", Name: "staff-read"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the broken policy was stored: %v", err)
	}
	good := strings.Replace(bad, `"compute:users:list"`, `"compute:users:list",`, 1)
	if res, body := admin.post("/policies/edit", url.Values{"tenant": {"acme"}, "name": {"staff-read"}, "body": {good}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("saving the fixed policy: %d %s", res.StatusCode, body)
	}
	got, err := st.api.Policies.GetPolicy(ctx, connect.NewRequest(&apiv1.GetPolicyRequest{Tenant: "acme", Name: "staff-read"}))
	if err != nil || got.Msg.GetPolicy().GetBody() != good {
		t.Fatalf("the stored policy: %v %v", got, err)
	}
	if _, body := admin.get("/policies?tenant=acme"); !strings.Contains(body, `data-policy="staff-read"`) || !strings.Contains(body, `data-policy="tenant-admins"`) {
		t.Error("the policy list lacks staff-read or tenant-admins")
	}

	// Principals: create a user, refuse a duplicate with the API's words and
	// the form kept, make a token (shown once), revoke it.
	if res, _ := admin.post("/principals", url.Values{"tenant": {"acme"}, "kind": {"user"}, "name": {"alice"}, "email": {"alice@acme.example"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("create user: %d", res.StatusCode)
	}
	res, body = admin.post("/principals", url.Values{"tenant": {"acme"}, "kind": {"service-account"}, "name": {"alice"}, "description": {"dup"}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="form-error"`) || !strings.Contains(body, "already exists") || !strings.Contains(body, `value="dup"`) {
		t.Errorf("a duplicate name: %d, want the API's refusal with the form kept", res.StatusCode)
	}
	res, body = admin.post("/tokens", url.Values{"tenant": {"acme"}, "principal": {"alice"}, "hours": {"2"}, "description": {"laptop"}})
	secret := regexp.MustCompile(`<pre id="token-secret">(bc_[^<]+)</pre>`).FindStringSubmatch(body)
	if res.StatusCode != http.StatusOK || secret == nil {
		t.Fatalf("create token: %d, secret shown %v", res.StatusCode, secret != nil)
	}
	me, err := newClient(t, st.url, secret[1]).System.WhoAmI(ctx, connect.NewRequest(&apiv1.WhoAmIRequest{}))
	if err != nil || me.Msg.GetName() != "alice" {
		t.Fatalf("the shown secret: %v %v", me, err)
	}
	if _, body := admin.get("/principals?tenant=acme"); strings.Contains(body, secret[1]) || !strings.Contains(body, `data-token="`+me.Msg.GetTokenId()+`"`) {
		t.Error("the principals page shows the secret again, or lacks the token")
	}
	if res, _ := admin.post("/tokens/revoke", url.Values{"tenant": {"acme"}, "id": {me.Msg.GetTokenId()}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d", res.StatusCode)
	}
	if _, err := newClient(t, st.url, secret[1]).System.WhoAmI(ctx, connect.NewRequest(&apiv1.WhoAmIRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("the revoked token still works: %v", err)
	}

	// Groups: add alice to admins, then remove her.
	if res, _ := admin.post("/groups/members", url.Values{"tenant": {"acme"}, "group": {"admins"}, "member": {"alice"}, "op": {"add"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("add member: %d", res.StatusCode)
	}
	if _, body := admin.get("/groups?tenant=acme"); !strings.Contains(body, `<li data-member="alice">`) {
		t.Error("the groups page does not list alice in admins")
	}
	if res, body := admin.post("/groups/members", url.Values{"tenant": {"acme"}, "group": {"admins"}, "member": {"ghost"}, "op": {"add"}}); res.StatusCode != http.StatusNotFound || !strings.Contains(body, `value="ghost"`) {
		t.Errorf("adding an unknown member: %d, want not found with the form kept", res.StatusCode)
	}
	if res, _ := admin.post("/groups/members", url.Values{"tenant": {"acme"}, "group": {"admins"}, "member": {"alice"}, "op": {"remove"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove member: %d", res.StatusCode)
	}
	g, err := st.api.Groups.GetGroup(ctx, connect.NewRequest(&apiv1.GetGroupRequest{Tenant: "acme", Name: "admins"}))
	if err != nil || len(g.Msg.GetGroup().GetMembers()) != 0 {
		t.Errorf("admins after removing alice: %v %v", g, err)
	}
	adminGroupForms(t, st, admin)
	adminPrincipalForms(t, st, admin)
	if res, _ := admin.post("/principals/delete", url.Values{"tenant": {"acme"}, "kind": {"user"}, "name": {"alice"}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("delete user: %d", res.StatusCode)
	}

	// Tenants: the platform creates one.
	if res, _ := admin.post("/tenants", url.Values{"name": {"globex"}, "display_name": {"Globex"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("create tenant: %d", res.StatusCode)
	}
	if _, body := admin.get("/tenants"); !strings.Contains(body, `data-tenant="globex"`) {
		t.Error("the tenants page lacks globex")
	}
	if res, body := admin.post("/tenants", url.Values{"name": {"Bad Name"}}); res.StatusCode != http.StatusBadRequest || !strings.Contains(body, `value="Bad Name"`) {
		t.Errorf("a bad tenant name: %d, want 400 with the form kept", res.StatusCode)
	}
	adminTenantForms(t, st, admin)
	adminFormsDenied(t, st)
}

// wantRedirect fails the test unless res ends a form post by sending the
// browser to to.
func wantRedirect(t *testing.T, what string, res *http.Response, body, to string) {
	t.Helper()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != to {
		t.Fatalf("%s: %d to %q, want 303 to %q\n%s", what, res.StatusCode, res.Header.Get("Location"), to, body)
	}
}

// adminGroupForms: the platform admin creates a group in acme, describes
// it and deletes it; a bad name is refused with the API's one line and
// makes nothing, and a deletion not confirmed deletes nothing.
func adminGroupForms(t *testing.T, st *stack, admin *web) {
	t.Helper()
	ctx := t.Context()
	getGroup := func(name string) (*apiv1.Group, error) {
		g, err := st.api.Groups.GetGroup(ctx, connect.NewRequest(&apiv1.GetGroupRequest{Tenant: "acme", Name: name}))
		if err != nil {
			return nil, err
		}
		return g.Msg.GetGroup(), nil
	}
	listGroups := func() []string {
		t.Helper()
		res, err := st.api.Groups.ListGroups(ctx, connect.NewRequest(&apiv1.ListGroupsRequest{Tenant: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range res.Msg.GetGroups() {
			names = append(names, g.GetName())
		}
		return names
	}
	_, body := admin.get("/groups?tenant=acme")
	for _, form := range []string{`action="/groups"`, `action="/groups/update"`, `action="/groups/delete"`} {
		if !strings.Contains(body, form) {
			t.Errorf("the platform admin's groups page lacks the form %s", form)
		}
	}

	before := listGroups()
	_, apiErr := st.api.Groups.CreateGroup(ctx, connect.NewRequest(&apiv1.CreateGroupRequest{Tenant: "acme", Name: "Bad Group"}))
	if connect.CodeOf(apiErr) != connect.CodeInvalidArgument {
		t.Fatalf("the API took the group name %q: %v", "Bad Group", apiErr)
	}
	res, body := admin.post("/groups", url.Values{"tenant": {"acme"}, "name": {"Bad Group"}, "description": {"kept"}})
	if want := `id="form-error">` + htmlEscape(apiErr.(*connect.Error).Message()) + `</p>`; res.StatusCode != http.StatusBadRequest || !strings.Contains(body, want) {
		t.Errorf("a bad group name: %d, want 400 showing %s\n%s", res.StatusCode, want, body)
	}
	if !strings.Contains(body, `value="Bad Group"`) || !strings.Contains(body, `value="kept"`) {
		t.Error("the refused group form lost its values")
	}
	if after := listGroups(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("a refused group form changed the groups: %v, then %v", before, after)
	}

	res, body = admin.post("/groups", url.Values{"tenant": {"acme"}, "name": {"staff"}, "description": {"The staff"}})
	wantRedirect(t, "create group", res, body, "/groups?tenant=acme")
	if g, err := getGroup("staff"); err != nil || g.GetDescription() != "The staff" {
		t.Fatalf("the created group: %v %v", g, err)
	}
	if _, body := admin.get("/groups?tenant=acme"); !strings.Contains(body, `id="group-staff"`) || !strings.Contains(body, `value="The staff"`) {
		t.Error("the groups page lacks staff, or its edit form its description")
	}
	res, body = admin.post("/groups/update", url.Values{"tenant": {"acme"}, "name": {"staff"}, "description": {"Everyone on staff"}})
	wantRedirect(t, "describe group", res, body, "/groups?tenant=acme")
	if g, err := getGroup("staff"); err != nil || g.GetDescription() != "Everyone on staff" {
		t.Errorf("the described group: %v %v", g, err)
	}
	// Too long a description: the API's words, the edit form open with
	// what was typed.
	long := strings.Repeat("x", 300)
	res, body = admin.post("/groups/update", url.Values{"tenant": {"acme"}, "name": {"staff"}, "description": {long}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "description is 300 bytes long") || !strings.Contains(body, `id="edit-group-staff" open`) || !strings.Contains(body, `value="`+long+`"`) {
		t.Errorf("too long a description: %d, want 400 with the edit form open and kept\n%s", res.StatusCode, body)
	}

	res, body = admin.post("/groups/delete", url.Values{"tenant": {"acme"}, "name": {"staff"}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "tick the box to confirm") {
		t.Errorf("deleting a group unconfirmed: %d, want 400 asking to confirm", res.StatusCode)
	}
	if _, err := getGroup("staff"); err != nil {
		t.Fatalf("an unconfirmed deletion deleted the group: %v", err)
	}
	res, body = admin.post("/groups/delete", url.Values{"tenant": {"acme"}, "name": {"staff"}, "confirm": {"yes"}})
	wantRedirect(t, "delete group", res, body, "/groups?tenant=acme")
	if _, err := getGroup("staff"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the deleted group: %v", err)
	}
	if res, body := admin.post("/groups/delete", url.Values{"tenant": {"acme"}, "name": {"staff"}, "confirm": {"yes"}}); res.StatusCode != http.StatusNotFound || !strings.Contains(body, `id="form-error"`) {
		t.Errorf("deleting a group twice: %d, want the API's not found", res.StatusCode)
	}
}

// adminPrincipalForms: the platform admin edits alice's display name and
// email, and a service account's description.
func adminPrincipalForms(t *testing.T, st *stack, admin *web) {
	t.Helper()
	ctx := t.Context()
	if _, err := st.api.ServiceAccounts.CreateServiceAccount(ctx, connect.NewRequest(&apiv1.CreateServiceAccountRequest{Tenant: "acme", Name: "ci"})); err != nil {
		t.Fatal(err)
	}
	_, body := admin.get("/principals?tenant=acme")
	if !strings.Contains(body, `id="edit-user-alice"`) || !strings.Contains(body, `id="edit-sa-ci"`) {
		t.Error("the platform admin's principals page lacks an edit form for alice or ci")
	}
	res, body := admin.post("/principals/update", url.Values{"tenant": {"acme"}, "kind": {"user"}, "name": {"alice"}, "display_name": {"Alice Liddell"}, "email": {"alice@wonder.example"}})
	wantRedirect(t, "edit user", res, body, "/principals?tenant=acme")
	u, err := st.api.Users.GetUser(ctx, connect.NewRequest(&apiv1.GetUserRequest{Tenant: "acme", Name: "alice"}))
	if err != nil || u.Msg.GetUser().GetDisplayName() != "Alice Liddell" || u.Msg.GetUser().GetEmail() != "alice@wonder.example" {
		t.Errorf("the edited user: %v %v", u, err)
	}
	if _, body := admin.get("/principals?tenant=acme"); !strings.Contains(body, "<td>Alice Liddell</td>") {
		t.Error("the principals page does not show alice's new display name")
	}
	res, body = admin.post("/principals/update", url.Values{"tenant": {"acme"}, "kind": {"service-account"}, "name": {"ci"}, "description": {"Builds"}})
	wantRedirect(t, "edit service account", res, body, "/principals?tenant=acme")
	sa, err := st.api.ServiceAccounts.GetServiceAccount(ctx, connect.NewRequest(&apiv1.GetServiceAccountRequest{Tenant: "acme", Name: "ci"}))
	if err != nil || sa.Msg.GetServiceAccount().GetDescription() != "Builds" {
		t.Errorf("the edited service account: %v %v", sa, err)
	}
	if res, body := admin.post("/principals/update", url.Values{"tenant": {"acme"}, "kind": {"user"}, "name": {"ghost"}, "display_name": {"Ghost"}}); res.StatusCode != http.StatusNotFound || !strings.Contains(body, `id="form-error"`) {
		t.Errorf("editing an unknown user: %d, want the API's not found", res.StatusCode)
	}
}

// adminTenantForms: the platform admin renames globex's display name and
// deletes it once confirmed; the platform tenant offers no deletion.
func adminTenantForms(t *testing.T, st *stack, admin *web) {
	t.Helper()
	ctx := t.Context()
	getTenant := func() (*apiv1.Tenant, error) {
		res, err := st.api.Tenants.GetTenant(ctx, connect.NewRequest(&apiv1.GetTenantRequest{Name: "globex"}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetTenant(), nil
	}
	_, body := admin.get("/tenants")
	if !strings.Contains(body, `id="edit-tenant-globex"`) || !strings.Contains(body, `aria-label="Delete tenant globex"`) {
		t.Error("the tenants page offers the platform admin no edit or delete for globex")
	}
	if strings.Contains(body, `aria-label="Delete tenant platform"`) {
		t.Error("the tenants page offers to delete the platform tenant")
	}
	res, body := admin.post("/tenants/update", url.Values{"name": {"globex"}, "display_name": {"Globex Corporation"}})
	wantRedirect(t, "edit tenant", res, body, "/tenants")
	if tn, err := getTenant(); err != nil || tn.GetDisplayName() != "Globex Corporation" {
		t.Errorf("the edited tenant: %v %v", tn, err)
	}
	res, body = admin.post("/tenants/delete", url.Values{"name": {"globex"}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "tick the box to confirm") {
		t.Errorf("deleting a tenant unconfirmed: %d, want 400 asking to confirm", res.StatusCode)
	}
	if _, err := getTenant(); err != nil {
		t.Fatalf("an unconfirmed deletion deleted the tenant: %v", err)
	}
	res, body = admin.post("/tenants/delete", url.Values{"name": {"globex"}, "confirm": {"yes"}})
	wantRedirect(t, "delete tenant", res, body, "/tenants")
	if _, err := getTenant(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the deleted tenant: %v", err)
	}
	if _, body := admin.get("/tenants"); strings.Contains(body, `data-tenant="globex"`) {
		t.Error("the tenants page still lists globex")
	}
	if res, body := admin.post("/tenants/delete", url.Values{"name": {"platform"}, "confirm": {"yes"}}); res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "the platform tenant cannot be deleted") {
		t.Errorf("deleting the platform tenant: %d, want the API's refusal", res.StatusCode)
	}
}

// adminFormsDenied: a viewer whose policies let it list acme's groups and
// principals, and change nothing, is shown no form to change them, and a
// post it makes anyway is refused by the API and changes nothing.
func adminFormsDenied(t *testing.T, st *stack) {
	t.Helper()
	ctx := t.Context()
	viewer := `permit (
  principal == User::"acme/viewer",
  action in [Action::"compute:groups:list", Action::"compute:users:list", Action::"compute:service-accounts:list", Action::"compute:tokens:list"],
  resource
);`
	if _, err := st.api.Policies.PutPolicy(ctx, connect.NewRequest(&apiv1.PutPolicyRequest{Tenant: "acme", Name: "viewer", Body: viewer})); err != nil {
		t.Fatal(err)
	}
	if _, err := st.api.Users.CreateUser(ctx, connect.NewRequest(&apiv1.CreateUserRequest{Tenant: "acme", Name: "viewer"})); err != nil {
		t.Fatal(err)
	}
	tok, err := st.api.Tokens.CreateToken(ctx, connect.NewRequest(&apiv1.CreateTokenRequest{Tenant: "acme", Principal: "viewer", Ttl: durationHour()}))
	if err != nil {
		t.Fatal(err)
	}
	w := signedIn(t, st, tok.Msg.GetSecret())
	res, body := w.get("/groups")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `id="group-admins"`) {
		t.Fatalf("the viewer's groups page: %d", res.StatusCode)
	}
	for _, form := range []string{`action="/groups"`, `action="/groups/update"`, `action="/groups/delete"`, `action="/groups/members"`} {
		if strings.Contains(body, form) {
			t.Errorf("the viewer is offered the form %s", form)
		}
	}
	_, body = w.get("/principals")
	for _, form := range []string{`action="/principals"`, `action="/principals/update"`, `action="/principals/delete"`} {
		if strings.Contains(body, form) {
			t.Errorf("the viewer is offered the principals form %s", form)
		}
	}
	res, body = w.post("/groups", url.Values{"name": {"sneaky"}})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "may not compute:groups:create") {
		t.Errorf("the viewer creating a group: %d, want the API's denial", res.StatusCode)
	}
	if _, err := st.api.Groups.GetGroup(ctx, connect.NewRequest(&apiv1.GetGroupRequest{Tenant: "acme", Name: "sneaky"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the viewer's refused post made a group: %v", err)
	}
	res, body = w.post("/groups/delete", url.Values{"name": {"admins"}, "confirm": {"yes"}})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "may not compute:groups:delete") {
		t.Errorf("the viewer deleting a group: %d, want the API's denial", res.StatusCode)
	}
	if _, err := st.api.Groups.GetGroup(ctx, connect.NewRequest(&apiv1.GetGroupRequest{Tenant: "acme", Name: "admins"})); err != nil {
		t.Errorf("the viewer's refused post deleted admins: %v", err)
	}
	res, body = w.post("/principals/update", url.Values{"kind": {"user"}, "name": {"viewer"}, "display_name": {"Boss"}})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "may not compute:users:update") {
		t.Errorf("the viewer editing itself: %d, want the API's denial", res.StatusCode)
	}
}

func durationHour() *durationpb.Duration { return durationpb.New(time.Hour) }

// htmlEscape is s as html/template writes it in text.
func htmlEscape(s string) string { return template.HTMLEscapeString(s) }
