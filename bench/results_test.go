package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// result is one benchmark run as written to bench/results: the figures
// with everything needed to weigh them (the machine, the Go version, the
// knobs that were set, the command).
type result struct {
	Name    string             `json:"name"`
	Date    string             `json:"date"`
	Machine machine            `json:"machine"`
	Go      string             `json:"go"`
	Command string             `json:"command"`
	Knobs   map[string]string  `json:"knobs,omitempty"`
	Figures map[string]float64 `json:"figures"`
}

// machine describes where a benchmark ran.
type machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Memory string `json:"memory"`
}

// record writes figures to bench/results/<name>-<date>.json (replacing a
// run of the same day) and reports them as the benchmark's metrics, so that
// `go test -bench` prints what the file holds.
func record(b *testing.B, name string, figures map[string]float64) {
	b.Helper()
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range figures {
			if !yield(k) {
				return
			}
		}
	}) {
		b.ReportMetric(figures[k], k)
	}
	r := result{
		Name: name, Date: time.Now().UTC().Format(time.DateOnly), Go: runtime.Version(),
		Machine: machine{CPU: procField("/proc/cpuinfo", "model name"), Cores: runtime.NumCPU(), Memory: procField("/proc/meminfo", "MemTotal")},
		Command: "go test ./bench -run '^$' -bench '" + b.Name() + "' -benchtime 1x",
		Figures: figures,
	}
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "BENCH_") {
			if r.Knobs == nil {
				r.Knobs = map[string]string{}
			}
			r.Knobs[k] = v
		}
	}
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	file := filepath.Join("results", fmt.Sprintf("%s-%s.json", name, r.Date))
	if err := os.MkdirAll("results", 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(file, append(out, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %s", file)
}

// procField returns a field of a /proc file ("model name: AMD EPYC"), or "".
func procField(file, field string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == field {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// resultName turns a sub-benchmark's name into a file name:
// BenchmarkPlacement/sqlite/nodes=1000x8/ask=1/placers=8 becomes
// placement-sqlite-nodes-1000x8-ask-1-placers-8.
func resultName(b *testing.B) string {
	name := strings.TrimPrefix(b.Name(), "Benchmark")
	return strings.ToLower(strings.NewReplacer("/", "-", "=", "-").Replace(name))
}
