// Package cli is the better-compute command line: the server commands (serve,
// dev) and the client commands for every API group. Each group adds its
// commands to the root built here and shares its flags, its server contexts,
// its output formats and its one-line errors.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/better-compute/better-compute/client"
)

// Env is what the CLI reads from and writes to its surroundings, so tests can
// run it in-process.
type Env struct {
	// Args are the arguments without the program name.
	Args []string
	// Stdout receives results; Stderr receives logs.
	Stdout, Stderr io.Writer
	// Getenv reads the environment (os.Getenv in the real binary).
	Getenv func(string) string
}

// globals are the flags every command has.
type globals struct {
	env        Env
	configPath string // --config
	context    string // --context
	server     string // --server
	output     string // -o
}

// Execute runs the command line described by env.
func Execute(ctx context.Context, env Env) error {
	root := newRoot(env)
	root.SetArgs(env.Args)
	return root.ExecuteContext(ctx)
}

func newRoot(env Env) *cobra.Command {
	g := &globals{env: env}
	root := &cobra.Command{
		Use:   "better-compute",
		Short: "Reserve GPUs and servers you own, under policy",
		Long: "better-compute is the Better Compute control plane (serve, dev) and the\n" +
			"command-line client for its API.",
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		PersistentPreRunE: func(*cobra.Command, []string) error { return checkFormat(g.output) },
	}
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	pf := root.PersistentFlags()
	pf.StringVar(&g.configPath, "config", env.Getenv("BETTER_COMPUTE_CONFIG"), "CLI config file (default $XDG_CONFIG_HOME/better-compute/config.yaml; env BETTER_COMPUTE_CONFIG)")
	pf.StringVar(&g.context, "context", env.Getenv("BETTER_COMPUTE_CONTEXT"), "server context from the config file (env BETTER_COMPUTE_CONTEXT)")
	pf.StringVar(&g.server, "server", env.Getenv("BETTER_COMPUTE_SERVER"), "server URL, overriding the context (env BETTER_COMPUTE_SERVER)")
	pf.StringVarP(&g.output, "output", "o", formatTable, "output format: table, json or yaml")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{formatTable, formatJSON, formatYAML}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		cfg, err := LoadConfig(g.configFile())
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []string
		for _, c := range cfg.Contexts {
			names = append(names, c.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})

	root.AddCommand(
		newServeCommand(g),
		newDevCommand(g),
		newVersionCommand(g),
		newStatusCommand(g),
		newWhoAmICommand(g),
		newTenantsCommand(g),
		newUsersCommand(g),
		newServiceAccountsCommand(g),
		newGroupsCommand(g),
		newTokensCommand(g),
		newPoliciesCommand(g),
		newAuditCommand(g),
		newNodesCommand(g),
		newJoinTokensCommand(g),
		newPoolsCommand(g),
		newReservationsCommand(g),
		newUsageCommand(g),
		newEventsCommand(g),
		newWebhooksCommand(g),
	)
	return root
}

func (g *globals) configFile() string {
	if g.configPath != "" {
		return g.configPath
	}
	return defaultConfigPath(g.env.Getenv)
}

func (g *globals) printer(cmd *cobra.Command) printer {
	return printer{w: cmd.OutOrStdout(), format: g.output}
}

// target resolves which server to call and with which token: --server or
// BETTER_COMPUTE_SERVER over the chosen context; BETTER_COMPUTE_TOKEN over the
// context's token.
func (g *globals) target() (server, token string, err error) {
	cfg, err := LoadConfig(g.configFile())
	if err != nil {
		return "", "", err
	}
	name := g.context
	if name == "" {
		name = cfg.CurrentContext
	}
	var ctx Context
	if name != "" {
		var ok bool
		if ctx, ok = cfg.Find(name); !ok {
			return "", "", fmt.Errorf("no context %q in %s: choose one of the contexts there, or pass --server", name, g.configFile())
		}
	}
	server, token = ctx.Server, ctx.Token
	if g.server != "" && g.server != ctx.Server {
		server, token = g.server, ""
	}
	if t := g.env.Getenv("BETTER_COMPUTE_TOKEN"); t != "" {
		token = t
	}
	if server == "" {
		return "", "", errors.New("no server configured: start one with `better-compute dev`, or pass --server URL (or set BETTER_COMPUTE_SERVER)")
	}
	return server, token, nil
}

// client returns an API client for the resolved server.
func (g *globals) client() (*client.Client, error) {
	server, token, err := g.target()
	if err != nil {
		return nil, err
	}
	return client.New(server, client.Options{Token: token})
}

// callError turns an API call's failure into one line that says what happened
// and, where it can, what to do.
func callError(c *client.Client, err error) error {
	var opErr *net.OpError
	if errors.As(err, &opErr) || errors.Is(err, syscall.ECONNREFUSED) {
		cause := "unreachable"
		if errors.Is(err, syscall.ECONNREFUSED) {
			cause = "connection refused"
		}
		return fmt.Errorf("cannot reach the server at %s (%s): start it with `better-compute dev`, or check --server", c.BaseURL(), cause)
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg := strings.ReplaceAll(ce.Message(), "\n", " ")
		switch ce.Code() {
		case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
			return fmt.Errorf("the server at %s did not answer (%s): %s", c.BaseURL(), ce.Code(), msg)
		}
		return fmt.Errorf("%s: %s", strings.ReplaceAll(ce.Code().String(), "_", " "), msg)
	}
	return err
}

// usageError marks a mistake in how the command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// ExitCode is the process exit status for an error Execute returned: 2 for a
// usage mistake, 1 for anything else.
func ExitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return 2
	}
	return 1
}

// isCobraUsage recognizes the errors cobra returns for unknown commands and
// wrong argument counts, which carry no type of their own.
func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "accepts ") ||
		strings.HasPrefix(s, "requires ") || strings.HasPrefix(s, "unknown flag")
}
