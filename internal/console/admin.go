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

// tenantsData is the tenants page's model.
type tenantsData struct {
	Tenants []*apiv1.Tenant
	Form    url.Values
	Error   string
}

func (s *server) tenants(w http.ResponseWriter, r *http.Request, sess *session) error {
	return s.showTenants(w, r, sess, http.StatusOK, nil, "")
}

func (s *server) showTenants(w http.ResponseWriter, r *http.Request, sess *session, status int, form url.Values, errMsg string) error {
	res, err := sess.api.Tenants.ListTenants(r.Context(), connect.NewRequest(&apiv1.ListTenantsRequest{}))
	if err != nil {
		return err
	}
	s.render(w, r, sess, status, "tenants", "Tenants", tenantsData{Tenants: res.Msg.GetTenants(), Form: form, Error: errMsg})
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
	Form   url.Values
	Error  string
}

func (s *server) principals(w http.ResponseWriter, r *http.Request, sess *session) error {
	return s.showPrincipals(w, r, sess, http.StatusOK, nil, nil, "")
}

func (s *server) showPrincipals(w http.ResponseWriter, r *http.Request, sess *session, status int, secret *apiv1.CreateTokenResponse, form url.Values, errMsg string) error {
	ctx := r.Context()
	d := principalsData{Tenant: adminTenant(r, sess), Hidden: map[string]string{}, Secret: secret, Form: form, Error: errMsg}
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
	s.redirect(w, r, "/principals?"+url.Values{"tenant": {tenant}}.Encode(), "Created "+kind+" "+name+".")
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
	s.redirect(w, r, "/principals?"+url.Values{"tenant": {tenant}}.Encode(), "Deleted "+name+" and its tokens.")
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
	s.redirect(w, r, "/principals?"+url.Values{"tenant": {tenant}}.Encode(), "Revoked token "+id+".")
	return nil
}

// groupsData is the groups page's model.
type groupsData struct {
	Tenant string
	Groups []*apiv1.Group
	Form   url.Values
	Error  string
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
	s.render(w, r, sess, status, "groups", "Groups", groupsData{Tenant: tenant, Groups: res.Msg.GetGroups(), Form: form, Error: errMsg})
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
	s.redirect(w, r, "/groups?"+url.Values{"tenant": {tenant}}.Encode(), msg)
	return nil
}
