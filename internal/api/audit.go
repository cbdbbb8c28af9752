package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/store"
)

// List pages (the audit log, usage): a default that suits a terminal, a
// cap that keeps one response small.
const (
	defaultPage = 100
	maxPage     = 1000
)

// pageOf checks a paged list's request: all_tenants is the platform's
// alone, and the page size is 0 (the default) to maxPage.
func pageOf(call *Call, allTenants bool, pageSize int32) (int, error) {
	if allTenants && !call.Platform {
		return 0, connect.NewError(connect.CodePermissionDenied, errors.New("all_tenants is for the platform tenant only; name your tenant instead"))
	}
	switch size := int(pageSize); {
	case size < 0 || size > maxPage:
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("page_size must be between 0 and %d", maxPage))
	case size == 0:
		return defaultPage, nil
	default:
		return size, nil
	}
}

// auditService reads the audit log.
type auditService struct{ base }

var _ apiv1connect.AuditServiceHandler = (*auditService)(nil)

func (s *auditService) ListAuditEvents(ctx context.Context, req *connect.Request[apiv1.ListAuditEventsRequest]) (*connect.Response[apiv1.ListAuditEventsResponse], error) {
	m := req.Msg
	call := callFrom(ctx)
	size, err := pageOf(call, m.GetAllTenants(), m.GetPageSize())
	if err != nil {
		return nil, err
	}
	f := store.AuditFilter{
		Tenant:     call.tenant(),
		AllTenants: m.GetAllTenants(),
		Principal:  m.GetPrincipal(),
		Action:     m.GetAction(),
		Resource:   m.GetResource(),
		Limit:      size + 1, // one more tells whether another page exists
	}
	if m.StartTime != nil {
		f.Since = m.GetStartTime().AsTime()
	}
	if m.EndTime != nil {
		f.Until = m.GetEndTime().AsTime()
	}
	if t := m.GetPageToken(); t != "" {
		id, err := decodePageToken(t)
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("page_token is not one this server issued; pass next_page_token from the previous page"))
		}
		f.BeforeID = id
	}
	events, err := s.store.ListAuditEvents(ctx, f)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListAuditEventsResponse{}
	if len(events) > size {
		events = events[:size]
		res.NextPageToken = encodePageToken(events[size-1].ID)
	}
	for _, e := range events {
		res.Events = append(res.Events, auditEventProto(e))
	}
	return connect.NewResponse(res), nil
}

// Page tokens are opaque to callers: the last id seen, encoded so nobody
// builds them by hand and later formats stay possible.
func encodePageToken(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("a" + strconv.FormatInt(id, 10)))
}

func decodePageToken(t string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil || len(b) < 2 || b[0] != 'a' {
		return 0, errors.New("bad page token")
	}
	id, err := strconv.ParseInt(string(b[1:]), 10, 64)
	if err != nil || id <= 0 {
		return 0, errors.New("bad page token")
	}
	return id, nil
}
