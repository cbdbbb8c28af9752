package api

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/version"
)

// systemService answers what the control plane is and how it runs.
type systemService struct {
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

// WhoAmI answers from what the authorizer established: it reads nothing
// more, so it costs no more than authenticating did.
func (s *systemService) WhoAmI(ctx context.Context, _ *connect.Request[apiv1.WhoAmIRequest]) (*connect.Response[apiv1.WhoAmIResponse], error) {
	call := callFrom(ctx)
	return connect.NewResponse(&apiv1.WhoAmIResponse{
		PrincipalType:   call.Caller.Type,
		Tenant:          call.Caller.Tenant,
		Name:            call.Caller.Name,
		Platform:        call.Platform,
		TokenId:         call.TokenID,
		TokenExpireTime: timestamppb.New(call.TokenExpires),
	}), nil
}
