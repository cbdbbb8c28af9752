// Command better-compute is the Better Compute control plane (serve, dev) and
// the command-line client for its API.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/better-compute/better-compute/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "better-compute: "+err.Error())
		os.Exit(cli.ExitCode(err))
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Execute(ctx, cli.Env{Args: args, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv})
}
