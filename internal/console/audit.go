package console

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// auditData is the audit page's model.
type auditData struct {
	Principal, Action, Resource string
	Hours                       string
	AllTenants, Platform        bool
	Events                      []*apiv1.AuditEvent
	// Next is the address of the next page, empty on the last. It is the
	// whole href, so that html/template normalizes it as a URL instead of
	// escaping its = and & as one query value.
	Next string
}

func (s *server) audit(w http.ResponseWriter, r *http.Request, sess *session) error {
	q := r.URL.Query()
	d := auditData{
		Principal: strings.TrimSpace(q.Get("principal")), Action: strings.TrimSpace(q.Get("action")),
		Resource: strings.TrimSpace(q.Get("resource")), Hours: q.Get("hours"),
		AllTenants: sess.platform && q.Get("all") == "on", Platform: sess.platform,
	}
	req := &apiv1.ListAuditEventsRequest{
		AllTenants: d.AllTenants, Principal: d.Principal, Action: d.Action, Resource: d.Resource,
		PageSize: 100, PageToken: q.Get("page"),
	}
	if d.Hours != "" {
		h, err := hours(d.Hours)
		if err != nil {
			s.renderError(w, r, sess, http.StatusBadRequest, err.Error())
			return nil
		}
		req.StartTime = timestamppb.New(time.Now().Add(-h))
	}
	res, err := sess.api.Audit.ListAuditEvents(r.Context(), connect.NewRequest(req))
	if err != nil {
		return err
	}
	d.Events = res.Msg.GetEvents()
	if next := res.Msg.GetNextPageToken(); next != "" {
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Set("page", next)
		d.Next = "/audit?" + nq.Encode()
	}
	s.render(w, r, sess, http.StatusOK, "audit", "Audit log", d)
	return nil
}
