// Package controlplane assembles the better-compute server process: it binds
// the listener, opens and migrates the store, mounts the API, health and
// metrics endpoints, and runs them until its context ends.
package controlplane

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/better-compute/better-compute/internal/api"
	"github.com/better-compute/better-compute/internal/requestid"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultListen is where the server listens unless told otherwise.
const DefaultListen = "127.0.0.1:7400"

// Config is everything one server process needs. Zero values take the
// defaults noted on each field.
type Config struct {
	// StoreURL is sqlite:PATH or postgres://...; required.
	StoreURL string
	// Listen is the address of the API; DefaultListen when empty.
	Listen string
	// DataDir holds the process's files (keys, the first admin token); created 0700 if missing.
	DataDir string
	// TLSCertFile and TLSKeyFile, both or neither, serve the API over TLS 1.3.
	TLSCertFile, TLSKeyFile string
	// AllowPlaintext permits serving without TLS on an address other than
	// loopback, for a deployment behind a TLS-terminating proxy.
	AllowPlaintext bool
	// ShutdownGrace bounds how long in-flight calls may take after the
	// context ends; 10s when zero.
	ShutdownGrace time.Duration
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Store tunes the store; its Logger defaults to Logger.
	Store store.Options
	// OnReady, when set, is called once, when the server accepts calls; an
	// error from it shuts the server down and is returned by Run.
	OnReady func(Ready) error
}

// Ready describes a server that has started, for summaries and tests.
type Ready struct {
	// URL is the base URL clients use, such as http://127.0.0.1:7400.
	URL string
	// Addr is the bound address (useful when listening on port 0).
	Addr net.Addr
	// Store is the open store's location, safe to print.
	Store store.Location
	// SchemaVersion is the store's schema version after migrating.
	SchemaVersion int
	// DeploymentID identifies the store's deployment; stable across restarts.
	DeploymentID string
	// AdminTokenFile is where the platform admin's first token was written
	// (<data-dir>/admin.token, 0600); empty when this process has no data dir.
	AdminTokenFile string
}

// Run serves until ctx ends, then shuts down gracefully. Every check that can
// fail on bad input (the store URL, the TLS files, the address) runs before
// anything is written.
func Run(ctx context.Context, cfg Config) error {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	started := time.Now()
	if cfg.StoreURL == "" {
		return errors.New("no store given: pass --store sqlite:PATH or --store postgres://USER@HOST:PORT/DB")
	}
	loc, err := store.ParseURL(cfg.StoreURL)
	if err != nil {
		return err
	}
	tlsConfig, err := loadTLS(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return err
	}
	addr := cmp.Or(cfg.Listen, DefaultListen)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("invalid --listen address %q: use HOST:PORT, such as %s", addr, DefaultListen)
	}
	if tlsConfig == nil && !cfg.AllowPlaintext && !isLoopback(addr) {
		return fmt.Errorf("refusing to serve without TLS on %s: give --tls-cert and --tls-key, listen on 127.0.0.1, or pass --allow-plaintext behind a TLS proxy", addr)
	}
	ln, err := listen(ctx, addr)
	if err != nil {
		return err
	}
	defer ln.Close() // after a successful Serve this is a harmless double close

	// A SQLite store inside the data dir (as with dev) needs the dir first;
	// otherwise the dir waits until the store is known good, so that a bad
	// store leaves nothing behind.
	if cfg.DataDir != "" && loc.Engine == store.EngineSQLite && within(cfg.DataDir, loc.Path) {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("create data dir: %w", err)
		}
	}
	storeOpts := cfg.Store
	if storeOpts.Logger == nil {
		storeOpts.Logger = logger
	}
	st, err := store.Open(ctx, cfg.StoreURL, storeOpts)
	if err != nil {
		return err
	}
	defer st.Close()
	schema, err := st.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	deploymentID, err := ensureDeploymentID(ctx, st)
	if err != nil {
		return err
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("create data dir: %w", err)
		}
	}

	adminTokenFile, err := bootstrap(ctx, st, cfg.DataDir, logger)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	if err := api.Mount(mux, api.Config{Store: st, Logger: logger, Metrics: reg, Started: started, DeploymentID: deploymentID}); err != nil {
		return err
	}
	mountProbes(mux, st, reg)

	srv := &http.Server{
		Handler:           requestid.Middleware(mux),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		Protocols:         new(http.Protocols),
		TLSConfig:         tlsConfig,
	}
	srv.Protocols.SetHTTP1(true)
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
		srv.Protocols.SetHTTP2(true)
	} else {
		// h2c: gRPC clients need HTTP/2, and on loopback TLS buys nothing.
		srv.Protocols.SetUnencryptedHTTP2(true)
	}

	serveErr := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	ready := Ready{URL: scheme + "://" + ln.Addr().String(), Addr: ln.Addr(), Store: st.Location(), SchemaVersion: schema, DeploymentID: deploymentID, AdminTokenFile: adminTokenFile}
	logger.Info("serving", "url", ready.URL, "store", ready.Store.String(), "schema_version", schema)
	var runErr error
	if cfg.OnReady != nil {
		runErr = cfg.OnReady(ready)
	}
	if runErr == nil {
		select {
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case <-ctx.Done():
		}
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(cfg.ShutdownGrace, 10*time.Second))
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return errors.Join(runErr, fmt.Errorf("shutdown: %w", err))
	}
	logger.Info("stopped")
	return runErr
}

func loadTLS(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

func listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("listen on %s: the address is already in use; stop the other process or choose another --listen", addr)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("listen on %s: permission denied; choose a port above 1023 with --listen", addr)
	default:
		return nil, fmt.Errorf("listen on %s: %w; check --listen", addr, err)
	}
}

// within reports whether path lies inside dir.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// isLoopback reports whether addr names only a loopback interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// mountProbes adds the endpoints that orchestrators and Prometheus scrape.
func mountProbes(mux *http.ServeMux, st *store.Store, reg *prometheus.Registry) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := st.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
}
