package cli

import (
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// newWhoAmICommand prints whom the configured token acts as. Every valid
// token may ask, so it is the way to check a token or a context.
func newWhoAmICommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the principal and the token the CLI calls the server as",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.System.WhoAmI(cmd.Context(), connect.NewRequest(&apiv1.WhoAmIRequest{}))
			if err != nil {
				return callError(c, err)
			}
			me := res.Msg
			return g.printer(cmd).print(docOf(me), func(w io.Writer) {
				fmt.Fprintf(w, "principal\t%s::\"%s/%s\"\n", me.GetPrincipalType(), me.GetTenant(), me.GetName())
				tenant := me.GetTenant()
				if me.GetPlatform() {
					tenant += " (platform)"
				}
				fmt.Fprintf(w, "tenant\t%s\n", tenant)
				fmt.Fprintf(w, "token\t%s\n", me.GetTokenId())
				fmt.Fprintf(w, "token expires\t%s\n", me.GetTokenExpireTime().AsTime().Format(time.RFC3339))
			})
		},
	}
}
