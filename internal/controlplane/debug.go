package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// listenDebug binds the profiling endpoint (Go's net/http/pprof under
// /debug/pprof/) on addr, which must be loopback: profiles show memory
// contents and stacks, and a CPU profile costs the server while it runs, so
// they are for an operator on the host, not for the network.
func listenDebug(ctx context.Context, addr string) (net.Listener, error) {
	if !isLoopback(addr) {
		return nil, fmt.Errorf("refusing the profiling endpoint on %s: --debug-listen takes a loopback address, such as 127.0.0.1:6060", addr)
	}
	return listen(ctx, addr, "--debug-listen")
}

// serveDebug serves the profiles on ln until ctx ends.
func serveDebug(ctx context.Context, ln net.Listener, logger *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	logger.Info("profiling endpoint", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		logger.Error("profiling endpoint", "err", err)
	}
}
