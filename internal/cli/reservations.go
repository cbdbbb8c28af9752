package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func newReservationsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reservations",
		Short: "Reserve GPUs from pools, extend and release reservations",
		Long: "A reservation holds GPUs of a pool, of your tenant or one offered to it, until\n" +
			"its end time. `reservations create --pool P --gpus N --duration D` places it\n" +
			"and names the node and GPUs it got; `extend` moves its end later, `release`\n" +
			"frees its GPUs early.",
	}
	cmd.AddCommand(
		newReservationsCreateCommand(g),
		newReservationsListCommand(g),
		newReservationsGetCommand(g),
		newReservationsExtendCommand(g),
		newReservationsReleaseCommand(g),
	)
	return cmd
}

// completeReservations completes the ids of the tenant's reservations.
func completeReservations(g *globals) cobra.CompletionFunc {
	return completeFrom(g, func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
		res, err := c.Reservations.ListReservations(ctx, connect.NewRequest(&apiv1.ListReservationsRequest{Tenant: tenant}))
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, r := range res.Msg.GetReservations() {
			ids = append(ids, r.GetId())
		}
		return ids, nil
	})
}

// endFlags are --duration and --until, of which a command takes exactly one.
type endFlags struct {
	duration, until string
}

// add registers the flags; duration and until say what each means to the
// command, since create counts a duration from now and extend adds it to the
// current end.
func (e *endFlags) add(cmd *cobra.Command, duration, until string) {
	cmd.Flags().StringVar(&e.duration, "duration", "", duration+": a Go duration or days (90m, 12h, 7d, 1d12h)")
	cmd.Flags().StringVar(&e.until, "until", "", until+": an RFC 3339 time (2030-01-02T15:04:05Z)")
}

// parse checks that exactly one of the flags is set and returns it as a
// duration or a time; the other is nil.
func (e *endFlags) parse(cmd *cobra.Command) (*durationpb.Duration, *timestamppb.Timestamp, error) {
	hasD, hasU := cmd.Flags().Changed("duration"), cmd.Flags().Changed("until")
	switch {
	case hasD && hasU:
		return nil, nil, usageErrorf("pass --duration or --until, not both")
	case !hasD && !hasU:
		return nil, nil, usageErrorf("--duration or --until is required: say how long it lasts or when it ends")
	case hasD:
		d, err := parseDuration(e.duration)
		if err != nil || d <= 0 {
			return nil, nil, usageErrorf("--duration %q is not a positive duration: use a Go duration or days (90m, 12h, 7d)", e.duration)
		}
		return durationpb.New(d), nil, nil
	default:
		t, err := time.Parse(time.RFC3339, e.until)
		if err != nil {
			return nil, nil, usageErrorf("--until %q is not an RFC 3339 time (2030-01-02T15:04:05Z)", e.until)
		}
		return nil, timestamppb.New(t), nil
	}
}

func newReservationsCreateCommand(g *globals) *cobra.Command {
	req := &apiv1.CreateReservationRequest{}
	var gpus int
	var end endFlags
	cmd := &cobra.Command{
		Use:   "create --pool P --gpus N (--duration D | --until T)",
		Short: "Reserve GPUs from a pool",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Pool == "" {
				return usageErrorf("--pool is required: name the pool to reserve from")
			}
			if gpus < 1 || gpus > 1024 {
				return usageErrorf("--gpus %d is out of range: reserve 1 to 1024 GPUs", gpus)
			}
			req.Gpus = int32(gpus)
			d, u, err := end.parse(cmd)
			if err != nil {
				return err
			}
			switch {
			case d != nil:
				req.End = &apiv1.CreateReservationRequest_Duration{Duration: d}
			default:
				req.End = &apiv1.CreateReservationRequest_Until{Until: u}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Reservations.CreateReservation(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), reservationTable(res.Msg.GetReservation()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	cmd.Flags().StringVar(&req.Pool, "pool", "", "the pool to reserve from")
	cmd.Flags().StringVar(&req.PoolTenant, "pool-tenant", "", "the tenant that owns the pool (default: the reservation's tenant)")
	cmd.Flags().IntVar(&gpus, "gpus", 0, "how many GPUs, 1 to 1024")
	cmd.Flags().StringVar(&req.Model, "model", "", "a model key from the catalog, such as h100-sxm (default: any)")
	cmd.Flags().BoolVar(&req.SameNode, "same-node", false, "take all the GPUs from one node")
	cmd.Flags().StringVar(&req.IdempotencyKey, "idempotency-key", "", "a key that makes a retry return the same reservation")
	end.add(cmd, "how long it lasts, from now", "when it ends")
	_ = cmd.RegisterFlagCompletionFunc("pool", completePools(g))
	return cmd
}

func newReservationsListCommand(g *globals) *cobra.Command {
	req := &apiv1.ListReservationsRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's reservations, newest first",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Reservations.ListReservations(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), func(w io.Writer) {
				fmt.Fprintln(w, "ID\tSTATE\tPOOL\tGPUS\tMODEL\tNODE\tENDS")
				for _, r := range res.Msg.GetReservations() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.GetId(), reservationState(r.GetState()),
						reservationPool(r), r.GetGpus(), orDash(r.GetModel()), orDash(r.GetNodeId()), formatTime(r.GetEndTime(), "-"))
				}
			})
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newReservationsGetCommand(g *globals) *cobra.Command {
	req := &apiv1.GetReservationRequest{}
	cmd := &cobra.Command{
		Use:               "get ID",
		Short:             "Show a reservation with its node and GPUs",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeReservations(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Reservations.GetReservation(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), reservationTable(res.Msg.GetReservation()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

func newReservationsExtendCommand(g *globals) *cobra.Command {
	req := &apiv1.ExtendReservationRequest{}
	var end endFlags
	cmd := &cobra.Command{
		Use:               "extend ID (--duration D | --until T)",
		Short:             "Move an active reservation's end later (release ends it sooner)",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeReservations(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			d, u, err := end.parse(cmd)
			if err != nil {
				return err
			}
			switch {
			case d != nil:
				req.End = &apiv1.ExtendReservationRequest_Duration{Duration: d}
			default:
				req.End = &apiv1.ExtendReservationRequest_Until{Until: u}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Reservations.ExtendReservation(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), reservationTable(res.Msg.GetReservation()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	end.add(cmd, "how much later it ends: added to its current end", "its new end, after the current one")
	return cmd
}

func newReservationsReleaseCommand(g *globals) *cobra.Command {
	req := &apiv1.ReleaseReservationRequest{}
	cmd := &cobra.Command{
		Use:               "release ID",
		Short:             "End an active reservation and free its GPUs",
		Args:              exactArgs(1),
		ValidArgsFunction: firstArg(completeReservations(g)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Id = args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Reservations.ReleaseReservation(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return callError(c, err)
			}
			return g.printer(cmd).print(docOf(res.Msg), reservationTable(res.Msg.GetReservation()))
		},
	}
	addTenantFlag(g, cmd, &req.Tenant)
	return cmd
}

// reservationState prints a state without its enum prefix: PLACED, BOUND.
func reservationState(s apiv1.ReservationState) string {
	return strings.TrimPrefix(s.String(), "RESERVATION_STATE_")
}

// reservationPool prints the pool as TENANT/NAME.
func reservationPool(r *apiv1.Reservation) string {
	return r.GetPoolTenant() + "/" + r.GetPool()
}

func reservationTable(r *apiv1.Reservation) table {
	return func(w io.Writer) {
		fmt.Fprintf(w, "id\t%s\n", r.GetId())
		fmt.Fprintf(w, "state\t%s\n", reservationState(r.GetState()))
		fmt.Fprintf(w, "pool\t%s\n", reservationPool(r))
		fmt.Fprintf(w, "gpus\t%d\n", r.GetGpus())
		fmt.Fprintf(w, "model\t%s\n", orDash(r.GetModel()))
		nodes := r.GetNodeIds()
		if len(nodes) == 0 && r.GetNodeId() != "" {
			nodes = []string{r.GetNodeId()}
		}
		fmt.Fprintf(w, "node\t%s\n", orDash(strings.Join(nodes, ", ")))
		devices := r.GetDeviceUuids()
		if len(devices) == 0 {
			fmt.Fprintf(w, "devices\t-\n")
		}
		for i, d := range devices {
			label := ""
			if i == 0 {
				label = "devices"
			}
			fmt.Fprintf(w, "%s\t%s\n", label, d)
		}
		// The CDI device exists on the node while the reservation is bound:
		// a container runtime given this name gets exactly its GPUs.
		cdi := "-"
		if r.GetState() == apiv1.ReservationState_RESERVATION_STATE_BOUND {
			cdi = r.GetCdiDevice()
		}
		fmt.Fprintf(w, "cdi device\t%s\n", cdi)
		fmt.Fprintf(w, "bound\t%s\n", formatTime(r.GetBoundTime(), "-"))
		fmt.Fprintf(w, "ends\t%s\n", formatTime(r.GetEndTime(), "-"))
	}
}
