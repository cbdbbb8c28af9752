package console

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// The admin pages: tenants (the platform's), a tenant's principals and
// their tokens, and its groups. Each is a thin form over one API call; the
// API decides and its message is shown word for word, with the form kept.

// postedForm is what an admin page keeps of a form the API refused: its
// values and the path it was posted to. A page holds several forms (a new
// item's, and an edit form per item), so each refills only from its own
// post, never from a neighbour's fields of the same name.
type postedForm struct {
	// Form is the refused post's values; nil when there is nothing to refill.
	Form url.Values
	// path is where the refused form was posted.
	path string
	// Error is the API's one-line message, shown above the forms.
	Error string
}

// refused is the postedForm for a page shown again after r was refused
// with errMsg; form is nil when there is nothing to refill.
func refused(r *http.Request, form url.Values, errMsg string) postedForm {
	return postedForm{Form: form, path: r.URL.Path, Error: errMsg}
}

// Posted is the refused form's values if it was posted to path, else none
// (whose Get answers "").
func (p postedForm) Posted(path string) url.Values {
	if p.path != path {
		return nil
	}
	return p.Form
}

// Editing reports whether the refused form was the edit form, posted to
// path, of the item called name: that form is shown open, as it was sent.
func (p postedForm) Editing(path, name string) bool {
	return p.Posted(path) != nil && p.Form.Get("name") == name
}

// Edit is what an edit form's field shows: what the user sent, when that
// form was refused, else the item's current value.
func (p postedForm) Edit(path, name, field, current string) string {
	if p.Editing(path, name) {
		return p.Form.Get(field)
	}
	return current
}

// tenantPage is an admin page's address for tenant, where a form's
// redirect returns to.
func tenantPage(path, tenant string) string {
	return path + "?" + url.Values{"tenant": {tenant}}.Encode()
}

// confirmed reports whether a deletion's form had its confirm box ticked.
// Deleting a group or a tenant cannot be undone, so the form asks twice:
// the browser will not send it unticked, and a post without it (a script,
// an old page) deletes nothing.
func confirmed(r *http.Request) bool { return r.PostFormValue("confirm") == "yes" }

// tenantsData is the tenants page's model.
type tenantsData struct {
	Tenants []*apiv1.Tenant
	postedForm
}

func (s *server) tenants(w http.ResponseWriter, r *http.Request, sess *session) error {
	return s.showTenants(w, r, sess, http.StatusOK, nil, "")
}

func (s *server) showTenants(w http.ResponseWriter, r *http.Request, sess *session, status int, form url.Values, errMsg string) error {
	res, err := sess.api.Tenants.ListTenants(r.Context(), connect.NewRequest(&apiv1.ListTenantsRequest{}))
	if err != nil {
		return err
	}
	s.render(w, r, sess, status, "tenants", "Tenants", tenantsData{Tenants: res.Msg.GetTenants(), postedForm: refused(r, form, errMsg)})
	return nil
}

func (s *server) createTenant(w http.ResponseWriter, r *http.Request, sess *session) error {
	name := strings.TrimSpace(r.PostFormValue("name"))
	_, err := sess.api.Tenants.CreateTenant(r.Context(), connect.NewRequest(&apiv1.CreateTenantRequest{Name: name, DisplayName: strings.TrimSpace(r.PostFormValue("display_name"))}))
	if err != nil {
		return s.formError(err, func(status int, msg string) error { return s.showTenants(w, r, sess, status, r.PostForm, msg) })
	}
	s.redirect(w, r, "/tenants", "Created tenant "+name+".")
	return nil
}

// updateTenant changes a tenant's display name, the one field UpdateTenant
// carries: the name is what policies refer to, so it never changes.
func (s *server) updateTenant(w http.ResponseWriter, r *http.Request, sess *session) error {
	name, display := r.PostFormValue("name"), strings.TrimSpace(r.PostFormValue("display_name"))
	if _, err := sess.api.Tenants.UpdateTenant(r.Context(), connect.NewRequest(&apiv1.UpdateTenantRequest{Name: name, DisplayName: &display})); err != nil {
		return s.formError(err, func(status int, msg string) error { return s.showTenants(w, r, sess, status, r.PostForm, msg) })
	}
	s.redirect(w, r, "/tenants", "Saved tenant "+name+".")
	return nil
}

// deleteTenant deletes a tenant and everything in it, once confirmed.
func (s *server) deleteTenant(w http.ResponseWriter, r *http.Request, sess *session) error {
	name := r.PostFormValue("name")
	show := func(status int, msg string) error { return s.showTenants(w, r, sess, status, nil, msg) }
	if !confirmed(r) {
		return show(http.StatusBadRequest, "Tenant "+name+" was not deleted: tick the box to confirm deleting it and everything in it.")
	}
	if _, err := sess.api.Tenants.DeleteTenant(r.Context(), connect.NewRequest(&apiv1.DeleteTenantRequest{Name: name})); err != nil {
		return s.formError(err, show)
	}
	s.redirect(w, r, "/tenants", "Deleted tenant "+name+" and everything in it.")
	return nil
}

// formError shows a refused form again with the API's message, except for
// an unauthenticated call, which ends the session.
func (s *server) formError(err error, show func(status int, msg string) error) error {
	if connect.CodeOf(err) == connect.CodeUnauthenticated {
		return err
	}
	return show(statusOf(err), message(err))
}

// principalsData is the principals page's model.
type principalsData struct {
	Tenant          string
	Users           []*apiv1.User
	ServiceAccounts []*apiv1.ServiceAccount
	Tokens          []*apiv1.Token
	// Hidden says why a part is not shown, by part, when the API refused it.
	Hidden map[string]string
	// Secret is a token made by the last form, shown once.
	Secret *apiv1.CreateTokenResponse
	postedForm
}

func (s *server) principals(w http.ResponseWriter, r *http.Request, sess *session) error {
	return s.showPrincipals(w, r, sess, http.StatusOK, nil, nil, "")
}

func (s *server) showPrincipals(w http.ResponseWriter, r *http.Request, sess *session, status int, secret *apiv1.CreateTokenResponse, form url.Values, errMsg string) error {
	ctx := r.Context()
	d := principalsData{Tenant: adminTenant(r, sess), Hidden: map[string]string{}, Secret: secret, postedForm: refused(r, form, errMsg)}
	// Each part is its own permission: a denial hides that part only.
	part := func(name string, err error) error {
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			d.Hidden[name] = message(err)
			return nil
		}
		return err
	}
	users, err := sess.api.Users.ListUsers(ctx, connect.NewRequest(&apiv1.ListUsersRequest{Tenant: d.Tenant}))
	if err == nil {
		d.Users = users.Msg.GetUsers()
	} else if err := part("users", err); err != nil {
		return err
	}
	sas, err := sess.api.ServiceAccounts.ListServiceAccounts(ctx, connect.NewRequest(&apiv1.ListServiceAccountsRequest{Tenant: d.Tenant}))
	if err == nil {
		d.ServiceAccounts = sas.Msg.GetServiceAccounts()
	} else if err := part("service-accounts", err); err != nil {
		return err
	}
	tokens, err := sess.api.Tokens.ListTokens(ctx, connect.NewRequest(&apiv1.ListTokensRequest{Tenant: d.Tenant}))
	if err == nil {
		d.Tokens = tokens.Msg.GetTokens()
	} else if err := part("tokens", err); err != nil {
		return err
	}
	s.render(w, r, sess, status, "principals", "Principals", d)
	return nil
}

func (s *server) createPrincipal(w http.ResponseWriter, r *http.Request, sess *session) error {
	ctx, tenant := r.Context(), adminTenant(r, sess)
	name := strings.TrimSpace(r.PostFormValue("name"))
	var err error
	kind := "user"
	if r.PostFormValue("kind") == "service-account" {
		kind = "service account"
		_, err = sess.api.ServiceAccounts.CreateServiceAccount(ctx, connect.NewRequest(&apiv1.CreateServiceAccountRequest{
			Tenant: tenant, Name: name, Description: strings.TrimSpace(r.PostFormValue("description")),
		}))
	} else {
		_, err = sess.api.Users.CreateUser(ctx, connect.NewRequest(&apiv1.CreateUserRequest{
			Tenant: tenant, Name: name, Email: strings.TrimSpace(r.PostFormValue("email")), DisplayName: strings.TrimSpace(r.PostFormValue("description")),
		}))
	}
	if err != nil {
		return s.formError(err, func(status int, msg string) error { return s.showPrincipals(w, r, sess, status, nil, r.PostForm, msg) })
	}
	s.redirect(w, r, tenantPage("/principals", tenant), "Created "+kind+" "+name+".")
	return nil
}

// updatePrincipal changes a user's display name and email, or a service
// account's description: the fields UpdateUser and UpdateServiceAccount
// carry. The form sends every field, prefilled, so each is set as left.
func (s *server) updatePrincipal(w http.ResponseWriter, r *http.Request, sess *session) error {
	ctx, tenant, name := r.Context(), adminTenant(r, sess), r.PostFormValue("name")
	field := func(k string) *string { v := strings.TrimSpace(r.PostFormValue(k)); return &v }
	var err error
	if r.PostFormValue("kind") == "service-account" {
		_, err = sess.api.ServiceAccounts.UpdateServiceAccount(ctx, connect.NewRequest(&apiv1.UpdateServiceAccountRequest{
			Tenant: tenant, Name: name, Description: field("description"),
		}))
	} else {
		_, err = sess.api.Users.UpdateUser(ctx, connect.NewRequest(&apiv1.UpdateUserRequest{
			Tenant: tenant, Name: name, DisplayName: field("display_name"), Email: field("email"),
		}))
	}
	if err != nil {
		return s.formError(err, func(status int, msg string) error { return s.showPrincipals(w, r, sess, status, nil, r.PostForm, msg) })
	}
	s.redirect(w, r, tenantPage("/principals", tenant), "Saved "+name+".")
	return nil
}

func (s *server) deletePrincipal(w http.ResponseWriter, r *http.Request, sess *session) error {
	ctx, tenant, name := r.Context(), adminTenant(r, sess), r.PostFormValue("name")
	var err error
	if r.PostFormValue("kind") == "service-account" {
		_, err = sess.api.ServiceAccounts.DeleteServiceAccount(ctx, connect.NewRequest(&apiv1.DeleteServiceAccountRequest{Tenant: tenant, Name: name}))
	} else {
		_, err = sess.api.Users.DeleteUser(ctx, connect.NewRequest(&apiv1.DeleteUserRequest{Tenant: tenant, Name: name}))
	}
	if err != nil {
		return s.formError(err, func(status int, msg string) error { return s.showPrincipals(w, r, sess, status, nil, nil, msg) })
	}
	s.redirect(w, r, tenantPage("/principals", tenant), "Deleted "+name+" and its tokens.")
	return nil
}

func (s *server) createToken(w http.ResponseWriter, r *http.Request, sess *session) error {
	tenant := adminTenant(r, sess)
	show := func(status int, msg string) error { return s.showPrincipals(w, r, sess, status, nil, r.PostForm, msg) }
	ttl, err := hours(r.PostFormValue("hours"))
	if err != nil {
		return show(http.StatusBadRequest, err.Error())
	}
	res, err := sess.api.Tokens.CreateToken(r.Context(), connect.NewRequest(&apiv1.CreateTokenRequest{
		Tenant: tenant, Principal: strings.TrimSpace(r.PostFormValue("principal")),
		Ttl: durationpb.New(ttl.Round(time.Second)), Description: strings.TrimSpace(r.PostFormValue("description")),
	}))
	if err != nil {
		return s.formError(err, show)
	}
	// The secret is shown only in this answer: never in a redirect's
	// cookie or URL.
	return s.showPrincipals(w, r, sess, http.StatusOK, res.Msg, nil, "")
}

func (s *server) revokeToken(w http.ResponseWriter, r *http.Request, sess *session) error {
	tenant, id := adminTenant(r, sess), r.PostFormValue("id")
	if _, err := sess.api.Tokens.RevokeToken(r.Context(), connect.NewRequest(&apiv1.RevokeTokenRequest{Tenant: tenant, Id: id})); err != nil {
		return s.formError(err, func(status int, msg string) error { return s.showPrincipals(w, r, sess, status, nil, nil, msg) })
	}
	s.redirect(w, r, tenantPage("/principals", tenant), "Revoked token "+id+".")
	return nil
}

// groupsData is the groups page's model.
type groupsData struct {
	Tenant string
	Groups []*apiv1.Group
	postedForm
}

func (s *server) groups(w http.ResponseWriter, r *http.Request, sess *session) error {
	return s.showGroups(w, r, sess, http.StatusOK, nil, "")
}

func (s *server) showGroups(w http.ResponseWriter, r *http.Request, sess *session, status int, form url.Values, errMsg string) error {
	tenant := adminTenant(r, sess)
	res, err := sess.api.Groups.ListGroups(r.Context(), connect.NewRequest(&apiv1.ListGroupsRequest{Tenant: tenant}))
	if err != nil {
		return err
	}
	s.render(w, r, sess, status, "groups", "Groups", groupsData{Tenant: tenant, Groups: res.Msg.GetGroups(), postedForm: refused(r, form, errMsg)})
	return nil
}

// changeMember adds a member to a group or removes one, as the form's op
// says.
func (s *server) changeMember(w http.ResponseWriter, r *http.Request, sess *session) error {
	ctx, tenant := r.Context(), adminTenant(r, sess)
	group, member := r.PostFormValue("group"), strings.TrimSpace(r.PostFormValue("member"))
	var err error
	msg := "Added " + member + " to " + group + "."
	if r.PostFormValue("op") == "remove" {
		msg = "Removed " + member + " from " + group + "."
		_, err = sess.api.Groups.RemoveGroupMember(ctx, connect.NewRequest(&apiv1.RemoveGroupMemberRequest{Tenant: tenant, Group: group, Member: member}))
	} else {
		_, err = sess.api.Groups.AddGroupMember(ctx, connect.NewRequest(&apiv1.AddGroupMemberRequest{Tenant: tenant, Group: group, Member: member}))
	}
	if err != nil {
		return s.formError(err, func(status int, m string) error { return s.showGroups(w, r, sess, status, r.PostForm, m) })
	}
	s.redirect(w, r, tenantPage("/groups", tenant), msg)
	return nil
}

func (s *server) createGroup(w http.ResponseWriter, r *http.Request, sess *session) error {
	tenant, name := adminTenant(r, sess), strings.TrimSpace(r.PostFormValue("name"))
	if _, err := sess.api.Groups.CreateGroup(r.Context(), connect.NewRequest(&apiv1.CreateGroupRequest{
		Tenant: tenant, Name: name, Description: strings.TrimSpace(r.PostFormValue("description")),
	})); err != nil {
		return s.formError(err, func(status int, msg string) error { return s.showGroups(w, r, sess, status, r.PostForm, msg) })
	}
	s.redirect(w, r, tenantPage("/groups", tenant), "Created group "+name+".")
	return nil
}

// updateGroup changes a group's description, the one field UpdateGroup
// carries: a group is not renamed, since policies refer to it by name.
func (s *server) updateGroup(w http.ResponseWriter, r *http.Request, sess *session) error {
	tenant, name := adminTenant(r, sess), r.PostFormValue("name")
	desc := strings.TrimSpace(r.PostFormValue("description"))
	if _, err := sess.api.Groups.UpdateGroup(r.Context(), connect.NewRequest(&apiv1.UpdateGroupRequest{Tenant: tenant, Name: name, Description: &desc})); err != nil {
		return s.formError(err, func(status int, msg string) error { return s.showGroups(w, r, sess, status, r.PostForm, msg) })
	}
	s.redirect(w, r, tenantPage("/groups", tenant), "Saved group "+name+".")
	return nil
}

// deleteGroup deletes a group, once confirmed; its members stay.
func (s *server) deleteGroup(w http.ResponseWriter, r *http.Request, sess *session) error {
	tenant, name := adminTenant(r, sess), r.PostFormValue("name")
	show := func(status int, msg string) error { return s.showGroups(w, r, sess, status, nil, msg) }
	if !confirmed(r) {
		return show(http.StatusBadRequest, "Group "+name+" was not deleted: tick the box to confirm.")
	}
	if _, err := sess.api.Groups.DeleteGroup(r.Context(), connect.NewRequest(&apiv1.DeleteGroupRequest{Tenant: tenant, Name: name})); err != nil {
		return s.formError(err, show)
	}
	s.redirect(w, r, tenantPage("/groups", tenant), "Deleted group "+name+"; its members stay.")
	return nil
}
