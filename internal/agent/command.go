// Package agent is bcd, the node daemon: its commands, and (as the node
// issues land) its session to the gateway, journal, convergers and inventory.
package agent

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

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
	return root.ExecuteContext(ctx)
}
