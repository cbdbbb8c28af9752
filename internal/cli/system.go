package cli

import (
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/version"
)

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the client's build and, when one is configured, the server's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version.Get()
			local := &apiv1.GetVersionResponse{
				Version:       v.Version,
				Commit:        v.Commit,
				GoVersion:     v.GoVersion,
				SchemaVersion: int32(store.LatestSchemaVersion()),
			}
			// The server's version is a bonus: no server configured, or one
			// that is down, still prints the client's.
			var remote *apiv1.GetVersionResponse
			var remoteErr error
			if c, err := g.client(); err == nil {
				res, err := c.System.GetVersion(cmd.Context(), connect.NewRequest(&apiv1.GetVersionRequest{}))
				if err == nil {
					remote = res.Msg
				} else {
					remoteErr = callError(c, err)
				}
			}
			doc := document{members: []member{{"client", local}, {"server", nil}}}
			if remote != nil { // a typed nil would print as an empty message
				doc.members[1].msg = remote
			}
			return g.printer(cmd).print(doc, func(w io.Writer) {
				fmt.Fprintf(w, "client\t%s\n", v)
				switch {
				case remote != nil:
					fmt.Fprintf(w, "server\t%s\n", version.Info{Version: remote.Version, Commit: remote.Commit, GoVersion: remote.GoVersion})
				case remoteErr != nil:
					fmt.Fprintf(w, "server\tunknown: %v\n", remoteErr)
				}
			})
		},
	}
}

func newStatusCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the server's store, schema version and uptime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.System.GetStatus(cmd.Context(), connect.NewRequest(&apiv1.GetStatusRequest{}))
			if err != nil {
				return callError(c, err)
			}
			s := res.Msg
			return g.printer(cmd).print(docOf(s), func(w io.Writer) {
				fmt.Fprintf(w, "server\t%s\n", c.BaseURL())
				fmt.Fprintf(w, "version\t%s\n", s.GetVersion())
				fmt.Fprintf(w, "deployment\t%s\n", s.GetDeploymentId())
				fmt.Fprintf(w, "engine\t%s\n", s.GetEngine())
				fmt.Fprintf(w, "schema version\t%d\n", s.GetSchemaVersion())
				fmt.Fprintf(w, "uptime\t%s\n", s.GetUptime().AsDuration().Round(time.Second))
				fmt.Fprintf(w, "store time\t%s\n", s.GetStoreTime().AsTime().Format(time.RFC3339))
			})
		},
	}
}
