// Package api serves the public API: one Connect handler per service, kept
// thin (decode, call the domain package, encode), behind the interceptors that
// every method shares: metrics, the error boundary and authorization.
package api

import (
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/store"
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
	opts := connect.WithInterceptors(
		newMetricsInterceptor(cfg.Metrics),
		errorBoundary{logger: cfg.Logger},
		authorizer{methods: methods},
	)
	mux.Handle(apiv1connect.NewSystemServiceHandler(&systemService{
		store:        cfg.Store,
		started:      cfg.Started,
		deploymentID: cfg.DeploymentID,
	}, opts))
	return nil
}
