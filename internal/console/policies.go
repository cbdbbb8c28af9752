package console

import (
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// adminTenant is the tenant an admin page works on: the platform may pick
// any with ?tenant= (or a form's tenant field), anyone else works on its
// own. The API decides either way; this only picks what to ask for.
func adminTenant(r *http.Request, sess *session) string {
	if t := strings.TrimSpace(r.FormValue("tenant")); t != "" && sess.platform {
		return t
	}
	return sess.tenant
}

// policiesData is the policy list's model.
type policiesData struct {
	Tenant   string
	Policies []*apiv1.Policy
}

func (s *server) policies(w http.ResponseWriter, r *http.Request, sess *session) error {
	tenant := adminTenant(r, sess)
	res, err := sess.api.Policies.ListPolicies(r.Context(), connect.NewRequest(&apiv1.ListPoliciesRequest{Tenant: tenant}))
	if err != nil {
		return err
	}
	s.render(w, r, sess, http.StatusOK, "policies", "Policies", policiesData{Tenant: tenant, Policies: res.Msg.GetPolicies()})
	return nil
}

// policyData is the policy editor's model: the document as the user last
// sent it, and where the API found it wrong.
type policyData struct {
	Tenant, Name, Body string
	// Existing is true when editing a stored policy: its name is fixed.
	Existing bool
	// Problems are the API's findings; Lines is the body split for showing
	// them at their lines.
	Problems []*apiv1.PolicyProblem
	Lines    []policyLine
	Error    string
}

// policyLine is one line of the document shown with the problems at it.
type policyLine struct {
	N        int
	Text     string
	Problems []*apiv1.PolicyProblem
}

// lines splits body for the listing beside the editor, attaching each
// problem to its line; a problem without a line (the whole document) goes
// to the first.
func lines(body string, problems []*apiv1.PolicyProblem) []policyLine {
	ls := strings.Split(strings.ReplaceAll(body, "\r\n", "\n"), "\n")
	out := make([]policyLine, len(ls))
	for i, l := range ls {
		out[i] = policyLine{N: i + 1, Text: l}
	}
	for _, p := range problems {
		i := int(p.GetLine()) - 1
		if i < 0 || i >= len(out) {
			i = min(max(i, 0), len(out)-1)
		}
		out[i].Problems = append(out[i].Problems, p)
	}
	return out
}

func (s *server) policyEditor(w http.ResponseWriter, r *http.Request, sess *session) error {
	d := policyData{Tenant: adminTenant(r, sess), Name: r.URL.Query().Get("name")}
	if d.Name != "" {
		res, err := sess.api.Policies.GetPolicy(r.Context(), connect.NewRequest(&apiv1.GetPolicyRequest{Tenant: d.Tenant, Name: d.Name}))
		if err != nil {
			return err
		}
		d.Body, d.Existing = res.Msg.GetPolicy().GetBody(), true
	}
	s.render(w, r, sess, http.StatusOK, "policy", "Policy", d)
	return nil
}

// savePolicy validates the document through the API, then stores it. A
// document with problems is shown again with each problem at its line.
func (s *server) savePolicy(w http.ResponseWriter, r *http.Request, sess *session) error {
	d := policyData{
		Tenant:   adminTenant(r, sess),
		Name:     strings.TrimSpace(r.PostFormValue("name")),
		Body:     strings.ReplaceAll(r.PostFormValue("body"), "\r\n", "\n"),
		Existing: r.PostFormValue("existing") == "1",
	}
	again := func(status int) error {
		d.Lines = lines(d.Body, d.Problems)
		s.render(w, r, sess, status, "policy", "Policy", d)
		return nil
	}
	v, err := sess.api.Policies.ValidatePolicy(r.Context(), connect.NewRequest(&apiv1.ValidatePolicyRequest{Tenant: d.Tenant, Body: d.Body}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			return err
		}
		d.Error = message(err)
		return again(statusOf(err))
	}
	if d.Problems = v.Msg.GetProblems(); len(d.Problems) > 0 {
		return again(http.StatusBadRequest)
	}
	if _, err := sess.api.Policies.PutPolicy(r.Context(), connect.NewRequest(&apiv1.PutPolicyRequest{Tenant: d.Tenant, Name: d.Name, Body: d.Body})); err != nil {
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			return err
		}
		d.Error = message(err)
		return again(statusOf(err))
	}
	s.redirect(w, r, "/policies/edit?"+url.Values{"tenant": {d.Tenant}, "name": {d.Name}}.Encode(), "Saved policy "+d.Name+".")
	return nil
}

func (s *server) deletePolicy(w http.ResponseWriter, r *http.Request, sess *session) error {
	tenant, name := adminTenant(r, sess), r.PostFormValue("name")
	if _, err := sess.api.Policies.DeletePolicy(r.Context(), connect.NewRequest(&apiv1.DeletePolicyRequest{Tenant: tenant, Name: name})); err != nil {
		return err
	}
	s.redirect(w, r, tenantPage("/policies", tenant), "Deleted policy "+name+".")
	return nil
}
