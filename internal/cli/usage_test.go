package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/capacity"
	"github.com/better-compute/better-compute/internal/store"
)

// TestUsageListExport reserves GPUs through the CLI, meters three hours of
// the reservation with the meter's clock moved on, and reads the windows
// back with usage list and both export formats.
func TestUsageListExport(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)
	admin.do(t, &apiv1.CreatePoolResponse{}, "pools", "create", "gpu")
	seedGPUNode(t, admin.storeURL, "n-gpu-1", "platform", "gpu", 4)
	rc := &apiv1.CreateReservationResponse{}
	admin.do(t, rc, "reservations", "create", "--pool", "gpu", "--gpus", "2", "--duration", "1d")
	created := rc.GetReservation().GetCreateTime().AsTime()

	ctx := context.Background()
	st, err := store.Open(ctx, admin.storeURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	later := created.Add(3 * time.Hour)
	m := &capacity.Meter{Store: st, Now: func(context.Context) (time.Time, error) { return later, nil }}
	n, err := m.RunOnce(ctx)
	st.Close()
	if err != nil || n != 3 {
		t.Fatalf("meter wrote %d windows, %v; want 3", n, err)
	}
	want := 2 * store.HourStart(later).Sub(created).Microseconds()

	res := &apiv1.ListUsageResponse{}
	admin.do(t, res, "usage", "list")
	var total int64
	for _, w := range res.GetWindows() {
		total += w.GetQuantity()
		if w.GetMeter() != "gpu.h100.hours" || w.GetGpus() != 2 || w.GetReservationId() != rc.GetReservation().GetId() {
			t.Errorf("usage list window %v", w)
		}
	}
	if len(res.GetWindows()) != 3 || total != want {
		t.Errorf("usage list: %d windows of %d GPU-µs, want 3 of %d", len(res.GetWindows()), total, want)
	}
	out := admin.table(t, "usage", "list", "--limit", "2")
	if !strings.Contains(out, "GPU-HOURS") || !strings.Contains(out, "2.000000") || !strings.Contains(out, "more windows: repeat the command with --page-token") {
		t.Errorf("usage list --limit 2 table:\n%s", out)
	}

	// CSV to standard output: a header, then every window, in pages of
	// whatever size the server gives.
	out = admin.table(t, "usage", "export", "--format", "csv", "--since", created.Add(-time.Hour).Format(time.RFC3339))
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 4 || strings.Join(rows[0], ",") != strings.Join(usageCSVHeader, ",") {
		t.Fatalf("usage export --format csv = %q, %v; want a header and 3 rows", out, err)
	}
	total = 0
	for _, row := range rows[1:] {
		q, err := strconv.ParseInt(row[11], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		total += q
	}
	if total != want {
		t.Errorf("CSV quantities sum to %d, want %d", total, want)
	}

	// JSON to a file: one array; an empty selection is an empty array.
	for _, tt := range []struct {
		meter string
		n     int
	}{{"gpu.h100.hours", 3}, {"gpu.a100.hours", 0}} {
		path := filepath.Join(t.TempDir(), "usage.json")
		if out := admin.table(t, "usage", "export", "--format", "json", "--meter", tt.meter, "--file", path); out != "" {
			t.Errorf("usage export --file printed %q", out)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var ws []map[string]any
		if err := json.Unmarshal(b, &ws); err != nil || len(ws) != tt.n {
			t.Errorf("usage export --format json --meter %s = %s (%v), want an array of %d", tt.meter, b, err, tt.n)
		}
	}
}

func TestUsageUsageErrors(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"usage", "export"}, `--format "" is not an export format`},
		{[]string{"usage", "export", "--format", "xml"}, `--format "xml" is not an export format`},
		{[]string{"usage", "list", "--tenant", "acme", "--all-tenants"}, "exclude each other"},
		{[]string{"usage", "export", "--format", "csv", "--tenant", "acme", "--all-tenants"}, "exclude each other"},
		{[]string{"usage", "list", "--since", "yesterday"}, "--since"},
		{[]string{"usage", "list", "--until", "yesterday"}, "--until"},
		{[]string{"usage", "list", "--since", "1h", "--until", "2h"}, "is not after --since"},
		{[]string{"usage", "list", "--limit", "5000"}, "--limit 5000 is out of range"},
		{[]string{"usage", "list", "extra"}, "accepts 0 arg(s), received 1"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			err := e.fails(t, tt.want, tt.args...)
			if got := ExitCode(err); got != 2 {
				t.Errorf("exit code = %d, want 2", got)
			}
		})
	}
}
