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
	"github.com/better-compute/better-compute/internal/capacity"
	"github.com/better-compute/better-compute/internal/console"
	"github.com/better-compute/better-compute/internal/events"
	"github.com/better-compute/better-compute/internal/gateway"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/requestid"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/webhooks"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultListen is where the API listens unless told otherwise.
const DefaultListen = "127.0.0.1:7400"

// DefaultGatewayListen is where the node gateway listens unless told otherwise.
const DefaultGatewayListen = "127.0.0.1:7443"

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
	// WebhooksAllowPrivate lets webhooks target loopback, private and
	// link-local addresses; off, a tenant cannot make the control plane
	// call into its own network (dev and tests turn it on).
	WebhooksAllowPrivate bool
	// ShutdownGrace bounds how long in-flight calls may take after the
	// context ends; 10s when zero.
	ShutdownGrace time.Duration
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Store tunes the store; its Logger defaults to Logger.
	Store store.Options
	// GatewayListen is the node gateway's address (TLS 1.3: join, renew and
	// node sessions); DefaultGatewayListen when empty.
	GatewayListen string
	// GatewayAddresses are the host:port addresses nodes dial, as told in
	// join answers; the bound address when empty (the host name when bound
	// to all interfaces).
	GatewayAddresses []string
	// KeyFile holds the key that seals the CAs' private keys; <DataDir>/ca.key
	// when empty. Keep it out of the store's backups.
	KeyFile string
	// NodeCertTTL is the node certificates' lifetime; 24h when zero.
	NodeCertTTL time.Duration
	// HeartbeatInterval is the node sessions' heartbeat; 5s when zero.
	HeartbeatInterval time.Duration
	// BcdBinary is the bcd served to nodes at /downloads; bcd beside this
	// executable when empty (none when there is no such file).
	BcdBinary string
	// DebugListen, when set, serves Go's profiles (/debug/pprof/) on this
	// loopback address, for finding what a server spends its time on.
	DebugListen string
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
	// GatewayURL is what `bcd join --server` takes: https://host:port.
	GatewayURL string
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
	ln, err := listen(ctx, addr, "--listen")
	if err != nil {
		return err
	}
	defer ln.Close() // after a successful Serve this is a harmless double close
	gwAddr, err := reservePort(ctx, cmp.Or(cfg.GatewayListen, DefaultGatewayListen))
	if err != nil {
		return err
	}
	if cfg.DebugListen != "" {
		dln, err := listenDebug(ctx, cfg.DebugListen)
		if err != nil {
			return err
		}
		debugCtx, stopDebug := context.WithCancel(ctx)
		defer stopDebug()
		go serveDebug(debugCtx, dln, logger)
	}

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

	keyFile := cfg.KeyFile
	if keyFile == "" {
		if cfg.DataDir == "" {
			return errors.New("the CA keys need a place: pass --data-dir or BETTER_COMPUTE_KEY_FILE")
		}
		keyFile = filepath.Join(cfg.DataDir, "ca.key")
	}
	authority, err := pki.LoadOrCreate(ctx, st, keyFile, "bc-"+strings.ToLower(deploymentID))
	if err != nil {
		return err
	}
	gwAddrs := cfg.GatewayAddresses
	if len(gwAddrs) == 0 {
		gwAddrs = []string{advertised(gwAddr)}
	}
	join := gateway.NewJoinService(gateway.JoinConfig{
		Store: st, Authority: authority, CertTTL: cfg.NodeCertTTL, GatewayAddresses: gwAddrs,
		Logger: logger, Metrics: reg,
	})
	gw, err := gateway.New(gateway.Config{
		Store: st, Authority: authority, Join: join, Listen: gwAddr,
		HeartbeatInterval: cfg.HeartbeatInterval, Logger: logger, Metrics: reg,
	})
	if err != nil {
		return err
	}
	if _, err := gw.Listen(ctx); err != nil {
		return err
	}
	bcd, err := findBcd(cfg.BcdBinary)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	nodes := api.NodeAccess{Authority: authority, GatewayURL: "https://" + gwAddrs[0]}
	// What a node fetches bcd from: a wildcard bound address becomes this
	// host's name, as the gateway's does.
	apiURL := scheme(tlsConfig) + "://" + advertised(ln.Addr().String())
	if bcd != nil {
		bcd.mount(mux)
		nodes.DownloadURL, nodes.BcdSHA256 = apiURL+"/downloads/"+bcd.name, bcd.sha256
	}
	hub := events.NewHub(st, 0, 0, logger)
	// Webhook secrets are sealed under the CA keys' key file, so that a copy
	// of the database alone cannot sign deliveries.
	hooks := &webhooks.Worker{Store: st, Sealer: authority.Sealer(), Logger: logger, URLs: webhooks.URLChecker{AllowPrivate: cfg.WebhooksAllowPrivate}}
	if err := api.Mount(mux, api.Config{Store: st, Logger: logger, Metrics: reg, Started: started, DeploymentID: deploymentID, Sessions: gw, Nodes: nodes, Events: hub, Webhooks: hooks}); err != nil {
		return err
	}
	mountProbes(mux, st, reg)
	// The console calls the API in process, through the same mux and so the
	// same authentication, authorization and audit as any client.
	// Its CSRF key comes from the key file, which every process sharing the
	// store shares: a form rendered by one is accepted by another. Its
	// session cookie, which holds the user's token, is Secure unless this
	// is a loopback address: plaintext anywhere else is allowed only behind
	// a TLS proxy, where the browser speaks HTTPS.
	secure := tlsConfig != nil || !isLoopback(addr)
	if err := console.Mount(mux, console.Config{API: mux, Logger: logger, Secure: secure, CSRFKey: authority.Sealer().DeriveKey("console csrf v1")}); err != nil {
		return err
	}

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
	// The event streams end when shutdown begins, not when its grace runs
	// out: their hub stops first.
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	srv.RegisterOnShutdown(stopHub)
	hubDone := make(chan struct{})
	go func() {
		defer close(hubDone)
		_ = hub.Run(hubCtx)
	}()
	defer func() { stopHub(); <-hubDone }()
	if tlsConfig != nil {
		srv.Protocols.SetHTTP2(true)
	} else {
		// h2c: gRPC clients need HTTP/2, and on loopback TLS buys nothing.
		srv.Protocols.SetUnencryptedHTTP2(true)
	}

	serveErr := make(chan error, 2)
	go func() {
		if tlsConfig != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	gwCtx, stopGateway := context.WithCancel(context.WithoutCancel(ctx))
	gwDone := make(chan struct{})
	go func() {
		defer close(gwDone)
		if err := gw.Serve(gwCtx); err != nil {
			serveErr <- fmt.Errorf("gateway: %w", err)
		}
	}()
	// Reservations end by the store's clock, whichever process sweeps.
	expiryDone := make(chan struct{})
	go func() {
		defer close(expiryDone)
		_ = (&capacity.Expirer{Store: st, Logger: logger, OnExpired: func(rs []store.Reservation) {
			// Their nodes unbind them on their next spec.
			for _, r := range rs {
				for _, n := range r.NodeIDs {
					gw.Notify(n)
				}
			}
		}}).Run(gwCtx)
	}()
	// GPU-hours are metered once per window, whichever process writes them.
	meterDone := make(chan struct{})
	go func() {
		defer close(meterDone)
		_ = (&capacity.Meter{Store: st, Logger: logger}).Run(gwCtx)
	}()
	// Webhooks are claimed per webhook, whichever process delivers them.
	hooksDone := make(chan struct{})
	go func() {
		defer close(hooksDone)
		_ = hooks.Run(gwCtx)
	}()
	// Events are kept for a week: long enough for any watcher or webhook
	// to catch up after an outage, short enough to keep the table small.
	pruneDone := make(chan struct{})
	go func() {
		defer close(pruneDone)
		events.Prune(gwCtx, st, events.DefaultRetention, logger)
	}()
	defer func() {
		stopGateway()
		<-gwDone
		<-expiryDone
		<-meterDone
		<-hooksDone
		<-pruneDone
	}()
	ready := Ready{URL: apiURL, GatewayURL: nodes.GatewayURL, Addr: ln.Addr(), Store: st.Location(), SchemaVersion: schema, DeploymentID: deploymentID, AdminTokenFile: adminTokenFile}
	logger.Info("serving", "url", ready.URL, "gateway", ready.GatewayURL, "store", ready.Store.String(), "schema_version", schema)
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

func listen(ctx context.Context, addr, flag string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("listen on %s: the address is already in use; stop the other process or choose another %s", addr, flag)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("listen on %s: permission denied; choose a port above 1023 with %s", addr, flag)
	default:
		return nil, fmt.Errorf("listen on %s: %w; check %s", addr, err, flag)
	}
}

// scheme is the API's URL scheme.
func scheme(tlsConfig *tls.Config) string {
	if tlsConfig != nil {
		return "https"
	}
	return "http"
}

// reservePort checks that addr can be bound, before anything is written,
// and returns it with a concrete port (port 0 picks a free one, which the
// gateway then binds; the moment between is harmless for tests and never
// arises with a fixed port).
func reservePort(ctx context.Context, addr string) (string, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("invalid gateway address %q: use HOST:PORT, such as %s", addr, DefaultGatewayListen)
	}
	ln, err := listen(ctx, addr, "--gateway-listen")
	if err != nil {
		return "", fmt.Errorf("gateway: %w", err)
	}
	bound := ln.Addr().String()
	ln.Close()
	return bound, nil
}

// advertised is the address nodes should dial for a bound address: the
// host name when bound to every interface.
func advertised(bound string) string {
	host, port, _ := net.SplitHostPort(bound)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
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
