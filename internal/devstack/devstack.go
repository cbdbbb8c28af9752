// Package devstack runs a whole Better Compute installation in one process on
// one machine: the control plane on loopback with its store in SQLite under a
// data directory, and simulated nodes (real bcd agents on fake hardware)
// joined to it. `better-compute dev` runs it for people; tests and
// benchmarks run it for themselves.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/agent"
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
	// Nodes is how many simulated nodes to run, each with GPUs fake GPUs.
	Nodes, GPUs int
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
	if cfg.Nodes < 0 || cfg.GPUs < 0 {
		return errors.New("dev: --nodes and --gpus must not be negative")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	simDone := make(chan error, 1)
	simStarted := false
	err := controlplane.Run(ctx, controlplane.Config{
		StoreURL:      "sqlite:" + filepath.Join(cfg.DataDir, StoreFile),
		Listen:        cfg.Listen,
		GatewayListen: cfg.GatewayListen,
		DataDir:       cfg.DataDir,
		Logger:        logger,
		OnReady: func(r controlplane.Ready) error {
			if cfg.Nodes > 0 {
				token, err := simJoinToken(ctx, r, cfg.Nodes)
				if err != nil {
					return err
				}
				simStarted = true
				go func() {
					simDone <- agent.RunSim(ctx, agent.SimConfig{
						Nodes: cfg.Nodes, Server: r.GatewayURL, Token: token,
						DataDir: filepath.Join(cfg.DataDir, "nodes"), GPUs: cfg.GPUs,
						Logger: logger.With("component", "sim"),
					})
				}()
			}
			if cfg.OnReady != nil {
				return cfg.OnReady(r)
			}
			return nil
		},
	})
	cancel()
	if simStarted {
		if serr := <-simDone; serr != nil && !errors.Is(serr, context.Canceled) && err == nil {
			err = fmt.Errorf("dev: simulated nodes: %w", serr)
		}
	}
	return err
}

// simJoinToken asks the API, as the platform admin, for a token the
// simulated nodes join with. Nodes that joined on an earlier run ignore it.
func simJoinToken(ctx context.Context, r controlplane.Ready, uses int) (string, error) {
	b, err := os.ReadFile(r.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("dev: read the admin token: %w", err)
	}
	c, err := client.New(r.URL, client.Options{Token: strings.TrimSpace(string(b))})
	if err != nil {
		return "", err
	}
	res, err := c.JoinTokens.CreateJoinToken(ctx, connect.NewRequest(&apiv1.CreateJoinTokenRequest{
		MaxUses: int32(uses), Ttl: durationpb.New(10 * time.Minute), Description: "simulated dev nodes",
		Labels: map[string]string{"simulated": "true"},
	}))
	if err != nil {
		return "", fmt.Errorf("dev: join token for the simulated nodes: %w", err)
	}
	return res.Msg.GetSecret(), nil
}
