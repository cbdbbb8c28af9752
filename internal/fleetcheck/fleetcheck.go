// Package fleetcheck checks, from the outside, the invariants a control plane
// and its agents must keep whatever load they carried: no GPU booked twice,
// every bound reservation held by exactly the CDI specs on its nodes, no
// command run twice, and no node taken for unreachable while it was alive.
// The scale benchmarks run it at the end of every run, and the CI-sized
// scale test asserts it; both look only where an operator could (the API,
// the metrics, the nodes' CDI directories), so a check that passes says
// what a user would see.
package fleetcheck

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/agent"
)

// Fleet is what the checks look at.
type Fleet struct {
	// Client calls the API as a principal of Tenant that may list its
	// reservations and the nodes.
	Client *client.Client
	// Tenant whose reservations are checked; "" for the caller's own.
	Tenant string
	// ServerURL is the API's base URL, whose /metrics is read.
	ServerURL string
	// CDIDirs maps each node id to the directory its agent binds
	// reservations in.
	CDIDirs map[string]string
}

// Violations returns one line per broken invariant, sorted; none means the
// fleet is consistent. An error means the checks could not run.
func (f Fleet) Violations(ctx context.Context) ([]string, error) {
	var out []string
	res, err := f.Client.Reservations.ListReservations(ctx, connect.NewRequest(&apiv1.ListReservationsRequest{Tenant: f.Tenant}))
	if err != nil {
		return nil, fmt.Errorf("list reservations: %w", err)
	}
	rs := res.Msg.GetReservations()
	out = append(out, doubleBookings(rs)...)
	specs, err := f.readSpecs()
	if err != nil {
		return nil, err
	}
	out = append(out, specMismatches(rs, specs)...)
	metrics, err := f.metrics(ctx)
	if err != nil {
		return nil, err
	}
	if n := metrics[`bettercompute_gateway_command_results_total{outcome="duplicate"}`]; n > 0 {
		out = append(out, fmt.Sprintf("the gateway received %v duplicate command results: a command ran twice", n))
	}
	if n := metrics[`bettercompute_gateway_session_closes_total{reason="silent"}`]; n > 0 {
		out = append(out, fmt.Sprintf("the gateway ended %v sessions as silent while their agents were running", n))
	}
	nodes, err := f.Client.Nodes.ListNodes(ctx, connect.NewRequest(&apiv1.ListNodesRequest{}))
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Msg.GetNodes() {
		if _, ours := f.CDIDirs[n.GetId()]; ours && n.GetState() != apiv1.NodeState_NODE_STATE_READY {
			out = append(out, fmt.Sprintf("node %s is %s while its agent runs", n.GetId(), n.GetState()))
		}
	}
	slices.Sort(out)
	return out, nil
}

// doubleBookings finds GPUs that two active reservations hold.
func doubleBookings(rs []*apiv1.Reservation) []string {
	var out []string
	holder := map[string]string{}
	for _, r := range rs {
		if !active(r) {
			continue
		}
		for _, u := range r.GetDeviceUuids() {
			if prev, ok := holder[u]; ok {
				out = append(out, fmt.Sprintf("GPU %s is held by %s and %s", u, prev, r.GetId()))
			}
			holder[u] = r.GetId()
		}
	}
	return out
}

// spec is one CDI spec file as the checks read it.
type spec struct {
	node  string
	uuids []string
}

// specMismatches compares the CDI specs on the nodes with the reservations:
// a bound reservation has a spec on each of its nodes and together they
// name exactly its GPUs; an ended one has none. A placed one may be either
// way, being bound.
func specMismatches(rs []*apiv1.Reservation, specs map[string][]spec) []string {
	var out []string
	known := map[string]bool{}
	for _, r := range rs {
		known[r.GetId()] = true
		got := specs[r.GetId()]
		switch r.GetState() {
		case apiv1.ReservationState_RESERVATION_STATE_BOUND:
			var uuids, on []string
			for _, s := range got {
				uuids = append(uuids, s.uuids...)
				on = append(on, s.node)
			}
			slices.Sort(uuids)
			slices.Sort(on)
			if !slices.Equal(uuids, r.GetDeviceUuids()) || !slices.Equal(on, r.GetNodeIds()) {
				out = append(out, fmt.Sprintf("bound reservation %s holds %v on %v; the CDI specs name %v on %v",
					r.GetId(), r.GetDeviceUuids(), r.GetNodeIds(), uuids, on))
			}
		case apiv1.ReservationState_RESERVATION_STATE_RELEASED, apiv1.ReservationState_RESERVATION_STATE_EXPIRED:
			for _, s := range got {
				out = append(out, fmt.Sprintf("reservation %s ended, but node %s still has its CDI spec", r.GetId(), s.node))
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(specs)) {
		if !known[id] {
			out = append(out, fmt.Sprintf("node %s has a CDI spec for %s, which the API does not list", specs[id][0].node, id))
		}
	}
	return out
}

// readSpecs reads the CDI specs of every node, by reservation id.
func (f Fleet) readSpecs() (map[string][]spec, error) {
	out := map[string][]spec{}
	for node, dir := range f.CDIDirs {
		files, err := filepath.Glob(filepath.Join(dir, "bettercompute-*.json"))
		if err != nil {
			return nil, err
		}
		for _, file := range files {
			id, uuids, err := readSpec(file)
			if err != nil {
				return nil, err
			}
			out[id] = append(out[id], spec{node: node, uuids: uuids})
		}
	}
	return out, nil
}

// readSpec returns the device name and the GPU UUIDs of one CDI spec.
func readSpec(file string) (string, []string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
	}
	var s struct {
		Devices []struct {
			Name           string
			ContainerEdits struct{ Env []string }
		}
	}
	if err := json.Unmarshal(b, &s); err != nil || len(s.Devices) != 1 {
		return "", nil, fmt.Errorf("CDI spec %s: not one device (%v)", file, err)
	}
	for _, e := range s.Devices[0].ContainerEdits.Env {
		if v, ok := strings.CutPrefix(e, "NVIDIA_VISIBLE_DEVICES="); ok {
			return s.Devices[0].Name, strings.Split(v, ","), nil
		}
	}
	return "", nil, fmt.Errorf("CDI spec %s: no NVIDIA_VISIBLE_DEVICES", file)
}

// metrics reads the server's counters, by their full name with labels.
func (f Fleet) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.ServerURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

func active(r *apiv1.Reservation) bool {
	s := r.GetState()
	return s == apiv1.ReservationState_RESERVATION_STATE_PLACED || s == apiv1.ReservationState_RESERVATION_STATE_BOUND
}

// SimCDIDirs returns Fleet.CDIDirs for the n agents of a `bcd sim` run with
// --data-dir dataDir, which have joined.
func SimCDIDirs(dataDir string, n int) (map[string]string, error) {
	out := make(map[string]string, n)
	for i := range n {
		dir := agent.SimAgentDir(dataDir, i)
		id, err := agent.JoinedNodeID(dir)
		if err != nil {
			return nil, err
		}
		out[id] = agent.DefaultCDIDir(dir)
	}
	return out, nil
}
