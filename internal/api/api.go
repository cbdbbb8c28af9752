// Package api serves the public API: one Connect handler per service, kept
// thin (decode, call the domain package, encode), behind the interceptors that
// every method shares: metrics, the error boundary and authorization.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/events"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/webhooks"
)

// Config is what the handlers need from the process that serves them.
type Config struct {
	// Store is the control plane's store.
	Store *store.Store
	// Logger receives the detail of errors that callers only see a summary of.
	Logger *slog.Logger
	// Metrics registers the API's request metrics; nil registers nothing.
	Metrics prometheus.Registerer
	// Started is when the serving process started, for uptime.
	Started time.Time
	// DeploymentID identifies the deployment the store belongs to.
	DeploymentID string
	// Sessions is the gateway in this process, told about revocations and
	// queued commands; nil when none runs here.
	Sessions Sessions
	// Nodes describes how nodes join this deployment.
	Nodes NodeAccess
	// Webhooks checks webhook URLs, seals new webhooks' secrets and sends
	// test events; nil refuses private targets, seals with
	// Nodes.Authority's sealer and sends with the defaults.
	Webhooks *webhooks.Worker
	// Events follows the event outbox for the event stream (StreamPath);
	// nil serves ListEvents alone.
	Events *events.Hub
}

// Mount registers every service of the public API on mux.
func Mount(mux *http.ServeMux, cfg Config) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	methods, err := LoadMethods()
	if err != nil {
		return err
	}
	authz := iam.NewAuthorizer(func(ctx context.Context) (iam.Directory, error) {
		return iam.LoadDirectory(ctx, cfg.Store)
	}, iam.WithLogger(cfg.Logger))
	admit := &authorizer{methods: methods, store: cfg.Store, authz: authz, logger: cfg.Logger}
	opts := connect.WithHandlerOptions(
		connect.WithReadMaxBytes(maxRequestBytes),
		connect.WithInterceptors(
			newMetricsInterceptor(cfg.Metrics),
			errorBoundary{logger: cfg.Logger},
			admit,
		),
	)
	b := base{store: cfg.Store, logger: cfg.Logger}
	mux.Handle(apiv1connect.NewSystemServiceHandler(&systemService{
		authz:        admit,
		store:        cfg.Store,
		started:      cfg.Started,
		deploymentID: cfg.DeploymentID,
	}, opts))
	mux.Handle(apiv1connect.NewTenantServiceHandler(&tenantService{b}, opts))
	mux.Handle(apiv1connect.NewUserServiceHandler(&userService{principals{base: b, kind: store.PrincipalUser, typ: typeUser, noun: "user"}}, opts))
	mux.Handle(apiv1connect.NewServiceAccountServiceHandler(&serviceAccountService{principals{base: b, kind: store.PrincipalServiceAccount, typ: typeServiceAccount, noun: "service account"}}, opts))
	mux.Handle(apiv1connect.NewGroupServiceHandler(&groupService{b}, opts))
	mux.Handle(apiv1connect.NewTokenServiceHandler(&tokenService{b}, opts))
	mux.Handle(apiv1connect.NewPolicyServiceHandler(&policyService{b}, opts))
	mux.Handle(apiv1connect.NewAuditServiceHandler(&auditService{b}, opts))
	mux.Handle(apiv1connect.NewNodeServiceHandler(&nodeService{base: b, sessions: cfg.Sessions}, opts))
	mux.Handle(apiv1connect.NewJoinTokenServiceHandler(&joinTokenService{base: b, nodes: cfg.Nodes}, opts))
	mux.Handle(apiv1connect.NewPoolServiceHandler(&poolService{b}, opts))
	mux.Handle(apiv1connect.NewReservationServiceHandler(&reservationService{base: b, sessions: cfg.Sessions}, opts))
	mux.Handle(apiv1connect.NewUsageServiceHandler(&usageService{b}, opts))
	hooks := cfg.Webhooks
	if hooks == nil {
		hooks = &webhooks.Worker{Store: cfg.Store, Logger: cfg.Logger, Sealer: cfg.Nodes.Authority.Sealer()}
	}
	mux.Handle(apiv1connect.NewWebhookServiceHandler(&webhookService{base: b, worker: hooks, authz: admit}, opts))
	ev := &eventService{base: b, authz: admit, hub: cfg.Events}
	mux.Handle(apiv1connect.NewEventServiceHandler(ev, opts))
	if cfg.Events != nil {
		mux.HandleFunc("GET "+StreamPath, ev.stream)
	}
	return nil
}
