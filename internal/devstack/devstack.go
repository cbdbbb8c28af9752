// Package devstack runs a whole Better Compute installation in one process on
// one machine: the control plane on loopback with its store in SQLite under a
// data directory. `better-compute dev` runs it for people; tests and
// benchmarks run it for themselves. Simulated nodes join it as the node
// issues land.
package devstack

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"

	"github.com/better-compute/better-compute/internal/controlplane"
)

// StoreFile is the SQLite database's name inside the data directory.
const StoreFile = "better-compute.db"

// Config describes one dev stack.
type Config struct {
	// DataDir holds everything the stack keeps between runs; required.
	DataDir string
	// Listen is the API address; controlplane.DefaultListen when empty.
	Listen string
	// GatewayListen is the node gateway's address;
	// controlplane.DefaultGatewayListen when empty.
	GatewayListen string
	// Logger receives the stack's logs; nil discards them.
	Logger *slog.Logger
	// OnReady is called once the stack serves; see controlplane.Config.
	OnReady func(controlplane.Ready) error
}

// Run runs the stack until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.DataDir == "" {
		return errors.New("dev: no data directory given: pass --data-dir")
	}
	return controlplane.Run(ctx, controlplane.Config{
		StoreURL:      "sqlite:" + filepath.Join(cfg.DataDir, StoreFile),
		Listen:        cfg.Listen,
		GatewayListen: cfg.GatewayListen,
		DataDir:       cfg.DataDir,
		Logger:        cfg.Logger,
		OnReady:       cfg.OnReady,
	})
}
