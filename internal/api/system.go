package api

import (
	"context"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/version"
)

// systemService answers what the control plane is and how it runs, and who
// the caller is.
type systemService struct {
	// authz decides the actions WhoAmI is asked about.
	authz        *authorizer
	store        *store.Store
	started      time.Time
	deploymentID string
}

var _ apiv1connect.SystemServiceHandler = (*systemService)(nil)

func (s *systemService) GetVersion(context.Context, *connect.Request[apiv1.GetVersionRequest]) (*connect.Response[apiv1.GetVersionResponse], error) {
	v := version.Get()
	return connect.NewResponse(&apiv1.GetVersionResponse{
		Version:       v.Version,
		Commit:        v.Commit,
		GoVersion:     v.GoVersion,
		SchemaVersion: int32(store.LatestSchemaVersion()),
	}), nil
}

func (s *systemService) GetStatus(ctx context.Context, _ *connect.Request[apiv1.GetStatusRequest]) (*connect.Response[apiv1.GetStatusResponse], error) {
	schema, err := s.store.SchemaVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("get status: schema version: %w", err)
	}
	now, err := s.store.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("get status: store clock: %w", err)
	}
	return connect.NewResponse(&apiv1.GetStatusResponse{
		Engine:        string(s.store.Engine()),
		SchemaVersion: int32(schema),
		// Uptime is about this process, so the process clock is right here.
		Uptime:       durationpb.New(time.Since(s.started).Round(time.Millisecond)),
		StoreTime:    timestamppb.New(now),
		Version:      version.Get().Version,
		DeploymentId: s.deploymentID,
	}), nil
}

// maxWhoAmIActions bounds how many actions one WhoAmI may ask about.
const maxWhoAmIActions = 64

// WhoAmI answers from what the authorizer established, plus one policy
// decision per action asked about (cached by epoch, like every decision).
func (s *systemService) WhoAmI(ctx context.Context, req *connect.Request[apiv1.WhoAmIRequest]) (*connect.Response[apiv1.WhoAmIResponse], error) {
	call := callFrom(ctx)
	actions := req.Msg.GetActions()
	if len(actions) > maxWhoAmIActions {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%d actions asked about; at most %d", len(actions), maxWhoAmIActions))
	}
	var permitted []string
	for _, a := range actions {
		ok, err := s.permits(ctx, call, a)
		if err != nil {
			return nil, fmt.Errorf("who am i: %s: %w", a, err)
		}
		if ok {
			permitted = append(permitted, a)
		}
	}
	return connect.NewResponse(&apiv1.WhoAmIResponse{
		PrincipalType:    call.Caller.Type,
		Tenant:           call.Caller.Tenant,
		Name:             call.Caller.Name,
		Platform:         call.Platform,
		TokenId:          call.TokenID,
		TokenExpireTime:  timestamppb.New(call.TokenExpires),
		PermittedActions: permitted,
	}), nil
}

// permits reports whether the policies permit call's caller action on its
// own tenant or, for an action on the deployment, on the deployment. It
// answers a question and admits nothing, so it audits nothing. An unknown
// action, or one on other resources, is not permitted.
func (s *systemService) permits(ctx context.Context, call *Call, action string) (bool, error) {
	if action == actionSelfRead {
		return true, nil
	}
	_, resources, ok := iam.ActionAppliesTo(action)
	var res iam.Resource
	switch {
	case !ok:
		return false, nil
	case slices.Contains(resources, typeTenant):
		res = iam.Resource{Type: typeTenant, Tenant: call.Caller.Tenant}
	case slices.Contains(resources, typeSystem):
		res = iam.Resource{Type: typeSystem}
	default:
		return false, nil
	}
	dec, err := s.authz.authz.Authorize(ctx, call.epoch, iam.Request{Principal: call.Caller, Action: action, Resource: res})
	return dec.Allow, err
}
