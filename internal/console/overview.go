package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// microsPerHour turns usage quantities (GPU-microseconds) into GPU-hours.
const microsPerHour = float64(time.Hour / time.Microsecond)

// overviewData is the overview page's model.
type overviewData struct {
	// NodesHidden is the API's reason the caller cannot list nodes, if so.
	NodesHidden string
	NodeStates  []stateCount
	NodeTotal   int
	Models      []modelRow
	// Active counts the reservations holding GPUs, and their GPUs.
	Active, ActiveGPUs int
	Chart              barChart
}

type stateCount struct {
	State string
	N     int
}

// modelRow is one GPU model's capacity: free from the pools the caller can
// reserve from, total from the nodes it can see.
type modelRow struct {
	Model             string
	Free, Total, Used int
}

func (s *server) overview(w http.ResponseWriter, r *http.Request, sess *session) error {
	ctx := r.Context()
	var d overviewData
	totals := map[string]int{}
	var nodes *connect.Response[apiv1.ListNodesResponse]
	var err error = connect.NewError(connect.CodePermissionDenied, fmt.Errorf("your policies do not permit %s in tenant %s", actNodesList, sess.tenant))
	if sess.may[actNodesList] {
		nodes, err = sess.api.Nodes.ListNodes(ctx, connect.NewRequest(&apiv1.ListNodesRequest{}))
	}
	switch {
	case err == nil:
		byState := map[apiv1.NodeState]int{}
		for _, n := range nodes.Msg.GetNodes() {
			byState[n.GetState()]++
			if n.GetState() == apiv1.NodeState_NODE_STATE_REVOKED {
				continue
			}
			if c, err := strconv.Atoi(n.GetInventoryLabels()["gpu.count"]); err == nil {
				totals[cmp.Or(n.GetInventoryLabels()["gpu.model"], "unknown")] += c
			}
		}
		d.NodeTotal = len(nodes.Msg.GetNodes())
		for _, st := range []apiv1.NodeState{apiv1.NodeState_NODE_STATE_READY, apiv1.NodeState_NODE_STATE_JOINED, apiv1.NodeState_NODE_STATE_UNREACHABLE, apiv1.NodeState_NODE_STATE_REVOKED} {
			d.NodeStates = append(d.NodeStates, stateCount{State: nodeState(st), N: byState[st]})
		}
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		d.NodesHidden = message(err)
	default:
		return err
	}
	free := map[string]int{}
	var pools *connect.Response[apiv1.ListPoolsResponse]
	if sess.may[actPoolsList] {
		pools, err = sess.api.Pools.ListPools(ctx, connect.NewRequest(&apiv1.ListPoolsRequest{}))
		if err != nil && connect.CodeOf(err) != connect.CodePermissionDenied {
			return err
		}
	}
	if pools != nil && err == nil {
		for _, p := range pools.Msg.GetPools() {
			for m, n := range p.GetFreeGpus() {
				free[m] += int(n)
			}
		}
	}
	models := map[string]bool{}
	for m := range free {
		models[m] = true
	}
	for m := range totals {
		models[m] = true
	}
	for _, m := range sortedKeys(models) {
		row := modelRow{Model: m, Free: free[m], Total: totals[m]}
		row.Used = max(0, row.Total-row.Free)
		d.Models = append(d.Models, row)
	}
	var res []*apiv1.Reservation
	if sess.may[actReservationsList] {
		if res, err = s.reservationsOf(ctx, sess); err != nil {
			return err
		}
	}
	for _, rv := range res {
		if active(rv.GetState()) {
			d.Active++
			d.ActiveGPUs += int(rv.GetGpus())
		}
	}
	if d.Chart, err = s.bookedChart(ctx, sess, d.ActiveGPUs, sess.may[actUsageList]); err != nil {
		return err
	}
	s.render(w, r, sess, http.StatusOK, "overview", "Overview", d)
	return nil
}

// bookedChart plots the GPUs booked in each of the last 24 clock hours, as
// metered (an hour's GPU-hours are its average GPUs), and now; the hours
// are empty for a caller who may not read usage.
func (s *server) bookedChart(ctx context.Context, sess *session, now int, mayReadUsage bool) (barChart, error) {
	end := time.Now().UTC().Truncate(time.Hour)
	start := end.Add(-24 * time.Hour)
	var windows []*apiv1.UsageWindow
	if mayReadUsage {
		var err error
		windows, err = s.usageWindows(ctx, sess, &apiv1.ListUsageRequest{AllTenants: sess.platform, StartTime: timestamppb.New(start)})
		if err != nil && connect.CodeOf(err) != connect.CodePermissionDenied {
			return barChart{}, err
		}
	}
	c := barChart{Label: "GPUs booked, by hour over the last 24 hours (UTC), and now", Unit: "GPUs"}
	vals := make([]float64, 25)
	for i := range 24 {
		c.X = append(c.X, start.Add(time.Duration(i)*time.Hour).Format("15:04"))
	}
	c.X = append(c.X, "now")
	for _, u := range windows {
		i := int(u.GetStartTime().AsTime().Sub(start) / time.Hour)
		if i >= 0 && i < 24 {
			vals[i] += float64(u.GetQuantity()) / microsPerHour
		}
	}
	vals[24] = float64(now)
	c.Series = []series{{Name: "GPUs booked", Color: palette[0], Values: vals}}
	return c, nil
}

// usageWindows pages through the usage req selects, up to a bound that
// keeps one page view cheap.
func (s *server) usageWindows(ctx context.Context, sess *session, req *apiv1.ListUsageRequest) ([]*apiv1.UsageWindow, error) {
	req.PageSize = 1000
	var out []*apiv1.UsageWindow
	for range 20 {
		res, err := sess.api.Usage.ListUsage(ctx, connect.NewRequest(req))
		if err != nil {
			return out, err
		}
		out = append(out, res.Msg.GetWindows()...)
		if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	return out, nil
}

// reservationsOf returns the reservations the caller may see: its tenant's,
// or, for the platform, every tenant's (the API lists one tenant at a time).
func (s *server) reservationsOf(ctx context.Context, sess *session) ([]*apiv1.Reservation, error) {
	tenants := []string{""}
	if sess.platform {
		ts, err := sess.api.Tenants.ListTenants(ctx, connect.NewRequest(&apiv1.ListTenantsRequest{}))
		if err != nil {
			return nil, err
		}
		tenants = tenants[:0]
		for _, t := range ts.Msg.GetTenants() {
			tenants = append(tenants, t.GetName())
		}
	}
	var out []*apiv1.Reservation
	for _, t := range tenants {
		res, err := sess.api.Reservations.ListReservations(ctx, connect.NewRequest(&apiv1.ListReservationsRequest{Tenant: t}))
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, res.Msg.GetReservations()...)
	}
	slices.SortStableFunc(out, func(a, b *apiv1.Reservation) int {
		return b.GetCreateTime().AsTime().Compare(a.GetCreateTime().AsTime())
	})
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
