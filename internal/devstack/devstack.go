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

// The demo a newcomer finds: the simulated nodes are adopted into the
// platform's pool DefaultPool, which is offered to the tenant DemoTenant.
const (
	DefaultPool = "default"
	DemoTenant  = "demo"
)

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
		// dev's receivers are on this machine.
		WebhooksAllowPrivate: true,
		OnReady: func(r controlplane.Ready) error {
			// The caller first (dev writes the CLI context and its summary),
			// so that the CLI works as soon as the summary shows.
			if cfg.OnReady != nil {
				if err := cfg.OnReady(r); err != nil {
					return err
				}
			}
			if cfg.Nodes == 0 {
				return nil
			}
			simStarted = true
			go func() {
				token, err := simJoinToken(ctx, r, cfg.Nodes)
				if err == nil {
					err = agent.RunSim(ctx, agent.SimConfig{
						Nodes: cfg.Nodes, Server: r.GatewayURL, Token: token,
						DataDir: filepath.Join(cfg.DataDir, "nodes"), GPUs: cfg.GPUs,
						Logger: logger.With("component", "sim"),
					})
				}
				if err != nil && ctx.Err() == nil {
					// dev goes on serving without its nodes; say so now.
					logger.Error("dev: the simulated nodes stopped", "err", err)
				}
				simDone <- err
			}()
			return nil
		},
	})
	stopping := ctx.Err() != nil // the caller ended dev, as opposed to a failure
	cancel()
	if simStarted {
		// Errors of the simulated nodes while dev shuts down are the shutdown.
		if serr := <-simDone; serr != nil && !stopping && !errors.Is(serr, context.Canceled) && err == nil {
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
	if err := demoPool(ctx, c); err != nil {
		return "", err
	}
	res, err := c.JoinTokens.CreateJoinToken(ctx, connect.NewRequest(&apiv1.CreateJoinTokenRequest{
		MaxUses: int32(uses), Ttl: durationpb.New(10 * time.Minute), Description: "simulated dev nodes",
		Labels: map[string]string{"simulated": "true"}, Pool: DefaultPool,
	}))
	if err != nil {
		return "", fmt.Errorf("dev: join token for the simulated nodes: %w", err)
	}
	return res.Msg.GetSecret(), nil
}

// demoPool makes the demo tenant and the default pool offered to it, once;
// on later runs they exist already, which is fine.
func demoPool(ctx context.Context, c *client.Client) error {
	exists := func(err error) bool { return connect.CodeOf(err) == connect.CodeAlreadyExists }
	if _, err := c.Tenants.CreateTenant(ctx, connect.NewRequest(&apiv1.CreateTenantRequest{Name: DemoTenant, DisplayName: "Demo"})); err != nil && !exists(err) {
		return fmt.Errorf("dev: demo tenant: %w", err)
	}
	if _, err := c.Pools.CreatePool(ctx, connect.NewRequest(&apiv1.CreatePoolRequest{Name: DefaultPool, Description: "the simulated dev nodes"})); err != nil && !exists(err) {
		return fmt.Errorf("dev: default pool: %w", err)
	}
	if _, err := c.Pools.OfferPool(ctx, connect.NewRequest(&apiv1.OfferPoolRequest{Name: DefaultPool, ToTenant: DemoTenant})); err != nil && !exists(err) {
		return fmt.Errorf("dev: offer the default pool to the demo tenant: %w", err)
	}
	return nil
}
