// Package agent is bcd, the node daemon: its commands (join, node, status,
// doctor, sim), and the agent they run: a session to the gateway, a bbolt
// journal that keeps commands at most once, inventory reports and
// certificate renewal. The agent is a library too (Node, Join, RunSim), so
// the control plane's dev stack and tests run real agents in-process.
package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/better-compute/better-compute/internal/agent/inventory"
	"github.com/better-compute/better-compute/internal/version"
)

// Execute runs bcd with the given arguments (without the program name).
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := &cobra.Command{
		Use:           "bcd",
		Short:         "The Better Compute node daemon",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the bcd build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "bcd "+version.Get().String())
			return err
		},
	})
	root.AddCommand(joinCommand(), nodeCommand(), statusCommand(), doctorCommand(), simCommand())
	return root.ExecuteContext(ctx)
}

// dataDirFlag adds --data-dir to cmd.
func dataDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "data-dir", DefaultDataDir(), "where the node's identity and journal live (env BCD_DATA_DIR)")
}

// stderrLogger logs text lines to the command's stderr.
func stderrLogger(cmd *cobra.Command) *slog.Logger {
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// joinTokenEnv holds the join token for bcd join: a process's environment
// is readable only by its user, its arguments by everyone on the host.
const joinTokenEnv = "BCD_JOIN_TOKEN"

func joinCommand() *cobra.Command {
	var (
		cfg    JoinConfig
		fakehw string
	)
	cmd := &cobra.Command{
		Use:   "join --server URL",
		Short: "Join this host to the control plane with a join token",
		Long: "join checks the server against the CA pinned in the token before it sends\n" +
			"anything, then obtains the node's certificate and writes it, its key, the CA\n" +
			"bundle and the gateway addresses into the data dir.\n\n" +
			"The token comes from " + joinTokenEnv + ", which other users of the host\n" +
			"cannot read, or from --token, which they can (in the process list).",
		Example: "  " + joinTokenEnv + "=bcj_... bcd join --server https://cp.example.com:7443",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Token == "" {
				cfg.Token = os.Getenv(joinTokenEnv)
			}
			if cfg.Token == "" {
				return fmt.Errorf("no join token: set %s (or pass --token)", joinTokenEnv)
			}
			if fakehw != "" {
				// The same description bcd node will run with, so the host
				// facts sent at join (host name, machine id) match it.
				hw, err := inventory.LoadFakeHW(fakehw)
				if err != nil {
					return err
				}
				cfg.FakeHW = hw
			}
			cfg.Logger = stderrLogger(cmd)
			if err := Join(cmd.Context(), cfg); err != nil {
				return err
			}
			id, err := JoinedNodeID(cfg.DataDir)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "joined as node %s; start it with 'bcd node --data-dir %s'\n", id, cfg.DataDir)
			return err
		},
	}
	cmd.Flags().StringVar(&cfg.Server, "server", "", "the gateway's URL, https://host:port")
	cmd.Flags().StringVar(&cfg.Token, "token", "", "the join token (bcj_...); "+joinTokenEnv+" keeps it out of the process list")
	cmd.Flags().StringVar(&fakehw, "fakehw", "", "the fakehw description (YAML) bcd node will run with")
	dataDirFlag(cmd, &cfg.DataDir)
	_ = cmd.MarkFlagRequired("server")
	return cmd
}

func nodeCommand() *cobra.Command {
	var (
		cfg    Config
		fakehw string
	)
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run the node agent: hold the session, run commands, report inventory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fakehw != "" {
				hw, err := inventory.LoadFakeHW(fakehw)
				if err != nil {
					return err
				}
				cfg.FakeHW = hw
			}
			// A real node binds under /etc/cdi, where container runtimes
			// look; a fakehw node's GPUs do not exist, so its specs stay
			// in its data dir unless asked otherwise.
			if !cmd.Flags().Changed("cdi-dir") && cfg.FakeHW != nil {
				cfg.CDIDir = ""
			}
			cfg.Logger = stderrLogger(cmd)
			cfg.StatusSocket = true
			return NewNode(cfg).Run(cmd.Context())
		},
	}
	dataDirFlag(cmd, &cfg.DataDir)
	cmd.Flags().StringVar(&fakehw, "fakehw", "", "a fakehw description (YAML) that replaces the hardware edge")
	cmd.Flags().BoolVar(&cfg.HeartbeatLog, "heartbeat-log", false, "log every heartbeat sent and received")
	cmd.Flags().StringVar(&cfg.CDIDir, "cdi-dir", "/etc/cdi", "where reserved GPUs are bound as CDI specs (with --fakehw: DATA_DIR/cdi unless set)")
	return cmd
}

func statusCommand() *cobra.Command {
	var (
		dir    string
		output string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running node agent's session, certificate and journal",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			st, err := ReadStatus(dir)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return printStatus(cmd.OutOrStdout(), st, time.Now())
		},
	}
	dataDirFlag(cmd, &dir)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func doctorCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this node's identity, certificate, gateway, clock, GPUs and cgroups",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return newDoctor(dir).run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	dataDirFlag(cmd, &dir)
	return cmd
}

func simCommand() *cobra.Command {
	var cfg SimConfig
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "sim --nodes N --server URL --token T",
		Short: "Run N simulated nodes (real agents on fake hardware) in one process",
		Long: "sim joins N agents with one multi-use token on its first run (their identities\n" +
			"stay under DATA_DIR/sim/<i>/ and are reused later) and runs them until stopped.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			if cpuProfile != "" {
				// The fleet's own CPU, for telling a slow server from a
				// busy simulator when both share a machine.
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			return RunSim(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write the simulator's CPU profile to this file until it stops")
	cmd.Flags().IntVar(&cfg.Nodes, "nodes", 1, "how many agents to run")
	cmd.Flags().StringVar(&cfg.Server, "server", "", "the gateway's URL, https://host:port (first run)")
	cmd.Flags().StringVar(&cfg.Token, "token", "", "a join token with enough uses (first run)")
	dataDirFlag(cmd, &cfg.DataDir)
	cmd.Flags().IntVar(&cfg.GPUs, "gpus", 8, "GPUs per simulated node")
	cmd.Flags().StringVar(&cfg.Model, "model", inventory.DefaultFakeGPUModel, "the simulated GPU model")
	cmd.Flags().BoolVar(&cfg.HeartbeatLog, "heartbeat-log", false, "log every heartbeat (loud)")
	return cmd
}
