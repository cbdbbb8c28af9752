package api

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/store"
)

// usageService reads metered usage. A tenant's principals see their own
// tenant's (the authorizer turns another tenant into not_found); the
// platform names any tenant, or all of them.
type usageService struct{ base }

var _ apiv1connect.UsageServiceHandler = (*usageService)(nil)

func (s *usageService) ListUsage(ctx context.Context, req *connect.Request[apiv1.ListUsageRequest]) (*connect.Response[apiv1.ListUsageResponse], error) {
	m := req.Msg
	call := callFrom(ctx)
	size, err := pageOf(call, m.GetAllTenants(), m.GetPageSize())
	if err != nil {
		return nil, err
	}
	f := store.UsageFilter{
		Tenant:     call.tenant(),
		Principal:  m.GetPrincipal(),
		PoolTenant: m.GetPoolTenant(),
		Pool:       m.GetPool(),
		Meter:      m.GetMeter(),
		Limit:      size + 1, // one more tells whether another page exists
	}
	if m.GetAllTenants() {
		f.Tenant = ""
	}
	if m.StartTime != nil {
		f.From = m.GetStartTime().AsTime()
	}
	if m.EndTime != nil {
		f.To = m.GetEndTime().AsTime()
	}
	if !f.From.IsZero() && !f.To.IsZero() && f.To.Before(f.From) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("end_time is before start_time"))
	}
	if t := m.GetPageToken(); t != "" {
		key, err := decodeUsageToken(t)
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("page_token is not one this server issued; pass next_page_token from the previous page"))
		}
		f.After = key
	}
	windows, err := s.store.ListUsage(ctx, f)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListUsageResponse{}
	if len(windows) > size {
		windows = windows[:size]
		res.NextPageToken = encodeUsageToken(windows[size-1].Key)
	}
	for _, w := range windows {
		res.Windows = append(res.Windows, usageWindowProto(w))
	}
	return connect.NewResponse(res), nil
}

func usageWindowProto(w store.UsageWindow) *apiv1.UsageWindow {
	return &apiv1.UsageWindow{
		Key: w.Key, Tenant: w.Tenant, Principal: w.Principal, PoolTenant: w.PoolTenant, Pool: w.Pool,
		ReservationId: w.ReservationID, Model: w.ModelKey, Meter: w.Meter, Gpus: int32(w.GPUs),
		StartTime: ts(w.WindowStart), EndTime: ts(w.WindowEnd), Quantity: w.Quantity,
		CreateTime: ts(w.CreatedAt),
	}
}

// Usage page tokens are the key of the last window seen, opaque to callers
// like the audit log's, with a different prefix so neither is taken for
// the other.
func encodeUsageToken(key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("u" + key))
}

// decodeUsageToken refuses a token that no window key could have made (a
// window key is "reservation/model/hour": short, printable), so that a
// forged one is bad input, not a key the store chokes on.
func decodeUsageToken(t string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil || len(b) < 2 || len(b) > 257 || b[0] != 'u' {
		return "", errors.New("bad page token")
	}
	k := string(b[1:])
	if !utf8.ValidString(k) || strings.ContainsFunc(k, unicode.IsControl) {
		return "", errors.New("bad page token")
	}
	return k, nil
}
