package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/better-compute/better-compute/internal/controlplane"
	"github.com/better-compute/better-compute/internal/devstack"
)

// logFlags are the logging flags of the commands that run a server.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(cmd *cobra.Command, getenv func(string) string) {
	cmd.Flags().StringVar(&l.format, "log-format", envOr(getenv, "BETTER_COMPUTE_LOG_FORMAT", "text"), "log format: text or json (env BETTER_COMPUTE_LOG_FORMAT)")
	cmd.Flags().StringVar(&l.level, "log-level", envOr(getenv, "BETTER_COMPUTE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env BETTER_COMPUTE_LOG_LEVEL)")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageErrorf("unknown log level %q: use debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErrorf("unknown log format %q: use text or json", l.format)
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

func newServeCommand(g *globals) *cobra.Command {
	var (
		cfg  controlplane.Config
		logs logFlags
	)
	getenv := g.env.Getenv
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane",
		Long: "serve runs the control plane: the API, the node gateway, the console and the\n" +
			"workers (reservation expiry, usage metering, webhook delivery). It migrates the\n" +
			"store on start.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg.Logger = logger
			serverGC(getenv)
			return controlplane.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.StoreURL, "store", getenv("BETTER_COMPUTE_STORE"), "store URL: sqlite:PATH or postgres://USER@HOST:PORT/DB (env BETTER_COMPUTE_STORE)")
	f.StringVar(&cfg.Listen, "listen", envOr(getenv, "BETTER_COMPUTE_LISTEN", controlplane.DefaultListen), "API address (env BETTER_COMPUTE_LISTEN)")
	f.StringVar(&cfg.DataDir, "data-dir", envOr(getenv, "BETTER_COMPUTE_DATA_DIR", "/var/lib/better-compute"), "directory for keys and other server files (env BETTER_COMPUTE_DATA_DIR)")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", getenv("BETTER_COMPUTE_TLS_CERT"), "PEM certificate for the API; with --tls-key serves TLS 1.3")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", getenv("BETTER_COMPUTE_TLS_KEY"), "PEM private key for --tls-cert")
	f.BoolVar(&cfg.AllowPlaintext, "allow-plaintext", false, "serve without TLS on a non-loopback address (only behind a TLS-terminating proxy)")
	f.BoolVar(&cfg.WebhooksAllowPrivate, "webhooks-allow-private", false, "let webhooks target loopback, private and link-local addresses (receivers on the private network)")
	f.StringVar(&cfg.GatewayListen, "gateway-listen", envOr(getenv, "BETTER_COMPUTE_GATEWAY_LISTEN", controlplane.DefaultGatewayListen), "node gateway address: join, renew and node sessions over TLS 1.3 (env BETTER_COMPUTE_GATEWAY_LISTEN)")
	f.StringVar(&cfg.DebugListen, "debug-listen", "", "serve Go's profiles (/debug/pprof/) on this loopback address, such as 127.0.0.1:6060")
	f.StringSliceVar(&cfg.GatewayAddresses, "gateway-address", nil, "host:port nodes dial, when not the bound address (repeatable)")
	f.StringVar(&cfg.KeyFile, "key-file", getenv("BETTER_COMPUTE_KEY_FILE"), "the key sealing the CA keys (default <data-dir>/ca.key; env BETTER_COMPUTE_KEY_FILE)")
	f.DurationVar(&cfg.NodeCertTTL, "node-cert-ttl", 24*time.Hour, "lifetime of node certificates (renewed at 60%)")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 5*time.Second, "node session heartbeat; a node silent for 3 intervals is unreachable")
	f.StringVar(&cfg.BcdBinary, "bcd-binary", getenv("BETTER_COMPUTE_BCD_BINARY"), "the bcd binary served to nodes (default: bcd beside this executable)")
	logs.register(cmd, getenv)
	return cmd
}

func newDevCommand(g *globals) *cobra.Command {
	var (
		cfg  devstack.Config
		logs logFlags
	)
	getenv := g.env.Getenv
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything on this machine, with embedded SQLite, for trying it out",
		Long: "dev runs the control plane on 127.0.0.1 with its data in SQLite under the\n" +
			"data directory, and points the CLI at it (context \"dev\"). Running it again\n" +
			"keeps the data.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg.Logger = logger
			cfg.OnReady = func(r controlplane.Ready) error {
				return g.devReady(cmd.OutOrStdout(), cfg.DataDir, cfg.Nodes, cfg.GPUs, r)
			}
			return devstack.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", envOr(getenv, "BETTER_COMPUTE_DATA_DIR", defaultDataDir(getenv)), "where dev keeps its data (env BETTER_COMPUTE_DATA_DIR)")
	f.StringVar(&cfg.Listen, "listen", envOr(getenv, "BETTER_COMPUTE_LISTEN", controlplane.DefaultListen), "API address (env BETTER_COMPUTE_LISTEN)")
	f.StringVar(&cfg.GatewayListen, "gateway-listen", envOr(getenv, "BETTER_COMPUTE_GATEWAY_LISTEN", controlplane.DefaultGatewayListen), "node gateway address (env BETTER_COMPUTE_GATEWAY_LISTEN)")
	f.IntVar(&cfg.Nodes, "nodes", 3, "how many simulated nodes (real bcd agents on fake hardware) to run")
	f.IntVar(&cfg.GPUs, "gpus", 8, "fake GPUs per simulated node")
	logs.register(cmd, getenv)
	return cmd
}

// devContext is the name of the CLI context `dev` writes.
const devContext = "dev"

// devReady points the CLI at the dev server and tells the user what runs where.
func (g *globals) devReady(w io.Writer, dataDir string, nodes, gpus int, r controlplane.Ready) error {
	path := g.configFile()
	conf, err := LoadConfig(path)
	if err != nil {
		return err
	}
	// The admin token is the dev user's credential: put it where the CLI
	// looks, and show it, since dev is for trying things out.
	var token string
	if r.AdminTokenFile != "" {
		b, err := os.ReadFile(r.AdminTokenFile)
		if err != nil {
			return fmt.Errorf("read the admin token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	conf.Upsert(Context{Name: devContext, Server: r.URL, Token: token})
	conf.CurrentContext = devContext
	if err := conf.Save(path); err != nil {
		return err
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	_, err = fmt.Fprintf(w, `Better Compute dev is running.
  API        %s
  store      %s (schema version %d)
  data       %s
  CLI        context %q in %s
  admin      user admin of tenant platform; token %s
             (also in %s)
  gateway    %s (bcd join --server)
  nodes      %d simulated, %d fake GPUs each (better-compute nodes list)

In another terminal: better-compute status
Stop with Ctrl-C; the data stays for next time.
`, r.URL, r.Store, r.SchemaVersion, abs, devContext, path, token, r.AdminTokenFile, r.GatewayURL, nodes, gpus)
	return err
}

// serverGCPercent is serve's garbage collection target, unless GOGC is set.
// A control plane's memory is mostly long-lived session state (a TLS
// connection, a reader's stack) that the collector must only walk, and the
// default of 100 lets the heap grow to twice that before collecting. At 50
// an idle gateway with 10,000 sessions held about 15 KiB less per session,
// for collections that cost little: an idle gateway allocates slowly.
const serverGCPercent = 50

// serverGC sets serverGCPercent unless the operator chose with GOGC.
func serverGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
}
