package devices

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

const (
	resA = "r-aaaaaaaaaaaaaaaaaaaaaaaaaa"
	resB = "r-bbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// gpu is an inventory GPU as the agent reports it.
func gpu(i int32) *agentv1.GPU {
	return &agentv1.GPU{
		Index:      i,
		Uuid:       "GPU-0000000" + string(rune('0'+i)) + "-1111-2222-3333-444444444444",
		Name:       "NVIDIA H100 80GB HBM3",
		DevicePath: "/dev/nvidia" + string(rune('0'+i)),
	}
}

func gpus(idx ...int32) []*agentv1.GPU {
	var out []*agentv1.GPU
	for _, i := range idx {
		out = append(out, gpu(i))
	}
	return out
}

// setup returns a Writer on a fresh directory.
func setup(t *testing.T) *Writer {
	t.Helper()
	return &Writer{Dir: filepath.Join(t.TempDir(), "cdi")}
}

func mustSync(t *testing.T, w *Writer, allocs ...Allocation) Changes {
	t.Helper()
	ch, err := w.Sync(allocs)
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	return ch
}

// dirState maps each file in dir to its content and modification time.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = info.ModTime().Format(time.RFC3339Nano) + " " + info.Mode().String() + "\n" + string(b)
	}
	return out
}

func TestSpecContent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		gpus  []*agentv1.GPU
		spec  string
		nodes []string
		uuids []string
	}{
		{
			name: "one GPU",
			gpus: gpus(3),
			spec: `{
  "cdiVersion": "1.1.0",
  "kind": "bettercompute.dev/gpu",
  "devices": [
    {
      "name": "r-aaaaaaaaaaaaaaaaaaaaaaaaaa",
      "containerEdits": {
        "env": [
          "NVIDIA_VISIBLE_DEVICES=GPU-00000003-1111-2222-3333-444444444444"
        ],
        "deviceNodes": [
          {
            "path": "/dev/nvidia3"
          }
        ]
      }
    }
  ],
  "containerEdits": {
    "deviceNodes": [
      {
        "path": "/dev/nvidiactl"
      },
      {
        "path": "/dev/nvidia-uvm"
      },
      {
        "path": "/dev/nvidia-uvm-tools"
      }
    ]
  }
}
`,
			nodes: []string{"/dev/nvidia3"},
			uuids: []string{"GPU-00000003-1111-2222-3333-444444444444"},
		},
		{
			// Given out of order: the spec lists them by index.
			name: "four GPUs",
			gpus: gpus(6, 1, 7, 4),
			spec: `{
  "cdiVersion": "1.1.0",
  "kind": "bettercompute.dev/gpu",
  "devices": [
    {
      "name": "r-aaaaaaaaaaaaaaaaaaaaaaaaaa",
      "containerEdits": {
        "env": [
          "NVIDIA_VISIBLE_DEVICES=GPU-00000001-1111-2222-3333-444444444444,GPU-00000004-1111-2222-3333-444444444444,GPU-00000006-1111-2222-3333-444444444444,GPU-00000007-1111-2222-3333-444444444444"
        ],
        "deviceNodes": [
          {
            "path": "/dev/nvidia1"
          },
          {
            "path": "/dev/nvidia4"
          },
          {
            "path": "/dev/nvidia6"
          },
          {
            "path": "/dev/nvidia7"
          }
        ]
      }
    }
  ],
  "containerEdits": {
    "deviceNodes": [
      {
        "path": "/dev/nvidiactl"
      },
      {
        "path": "/dev/nvidia-uvm"
      },
      {
        "path": "/dev/nvidia-uvm-tools"
      }
    ]
  }
}
`,
			nodes: []string{"/dev/nvidia1", "/dev/nvidia4", "/dev/nvidia6", "/dev/nvidia7"},
			uuids: []string{
				"GPU-00000001-1111-2222-3333-444444444444", "GPU-00000004-1111-2222-3333-444444444444",
				"GPU-00000006-1111-2222-3333-444444444444", "GPU-00000007-1111-2222-3333-444444444444",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := setup(t)
			ch := mustSync(t, w, Allocation{ReservationID: resA, GPUs: tt.gpus})
			if !slices.Equal(ch.Written, []string{resA}) || len(ch.Removed) != 0 {
				t.Fatalf("changes = %+v, want %s written", ch, resA)
			}
			path := filepath.Join(w.Dir, "bettercompute-"+resA+".json")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.spec {
				t.Fatalf("spec:\n%s\nwant:\n%s", b, tt.spec)
			}
			info, err := os.Stat(path)
			if err != nil || info.Mode().Perm() != 0o644 {
				t.Fatalf("spec mode = %v, %v; want 0644", info.Mode(), err)
			}

			// Read back by the CDI package: it validates the spec.
			spec, err := cdi.ReadSpec(path, 0)
			if err != nil {
				t.Fatalf("CDI package refuses the spec: %v", err)
			}
			dev := spec.GetDevice(resA)
			if dev == nil || dev.GetQualifiedName() != DeviceName(resA) || len(spec.Devices) != 1 {
				t.Fatalf("spec devices = %+v, want one named %s", spec.Devices, DeviceName(resA))
			}
			var nodes []string
			for _, n := range dev.ContainerEdits.DeviceNodes {
				nodes = append(nodes, n.Path)
			}
			if !slices.Equal(nodes, tt.nodes) {
				t.Fatalf("device nodes = %v, want %v", nodes, tt.nodes)
			}
			visible := "NVIDIA_VISIBLE_DEVICES=" + strings.Join(tt.uuids, ",")
			if !slices.Equal(dev.ContainerEdits.Env, []string{visible}) {
				t.Fatalf("env = %v, want %s", dev.ContainerEdits.Env, visible)
			}

			env, err := os.ReadFile(filepath.Join(w.Dir, "bettercompute-"+resA+".env"))
			if err != nil {
				t.Fatal(err)
			}
			if want := "BETTERCOMPUTE_RESERVATION=" + resA + "\n" + visible + "\n"; string(env) != want {
				t.Fatalf("env file = %q, want %q", env, want)
			}
		})
	}
}

// TestRuntimeSees checks the directory as a container runtime reads it, with
// the CDI cache: exactly the reservations' devices, no errors, and env and
// foreign files no trouble.
func TestRuntimeSees(t *testing.T) {
	t.Parallel()
	w := setup(t)
	mustSync(t, w, Allocation{ReservationID: resA, GPUs: gpus(0, 1)}, Allocation{ReservationID: resB, GPUs: gpus(2)})
	cache, err := cdi.NewCache(cdi.WithSpecDirs(w.Dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("CDI cache: %v", err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	want := []string{DeviceName(resA), DeviceName(resB)}
	if got := cache.ListDevices(); !slices.Equal(got, want) {
		t.Fatalf("devices = %v, want %v", got, want)
	}
}

func TestRemoval(t *testing.T) {
	t.Parallel()
	w := setup(t)
	mustSync(t, w, Allocation{ReservationID: resA, GPUs: gpus(0)}, Allocation{ReservationID: resB, GPUs: gpus(1, 2)})
	ch := mustSync(t, w, Allocation{ReservationID: resB, GPUs: gpus(1, 2)})
	if len(ch.Written) != 0 || !slices.Equal(ch.Removed, []string{resA}) {
		t.Fatalf("changes = %+v, want %s removed only", ch, resA)
	}
	var names []string
	for name := range dirState(t, w.Dir) {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"bettercompute-" + resB + ".env", "bettercompute-" + resB + ".json"}; !slices.Equal(names, want) {
		t.Fatalf("files = %v, want %v", names, want)
	}
	ch = mustSync(t, w)
	if !slices.Equal(ch.Removed, []string{resB}) || len(dirState(t, w.Dir)) != 0 {
		t.Fatalf("changes = %+v, files %v; want everything removed", ch, dirState(t, w.Dir))
	}
}

func TestIdempotent(t *testing.T) {
	t.Parallel()
	w := setup(t)
	allocs := []Allocation{{ReservationID: resA, GPUs: gpus(0, 3)}, {ReservationID: resB, GPUs: gpus(1)}}
	mustSync(t, w, allocs...)
	before := dirState(t, w.Dir)
	// Let a rewrite show in the mtimes, whatever the file system's
	// timestamp resolution.
	time.Sleep(20 * time.Millisecond)
	// The same set in another order, GPUs shuffled: still no change.
	ch := mustSync(t, w, Allocation{ReservationID: resB, GPUs: gpus(1)}, Allocation{ReservationID: resA, GPUs: gpus(3, 0)})
	if !ch.Empty() {
		t.Fatalf("second Sync changed %+v", ch)
	}
	if after := dirState(t, w.Dir); !maps.Equal(before, after) {
		t.Fatalf("files changed:\n%v\n%v", before, after)
	}

	// A changed allocation rewrites that reservation only.
	ch = mustSync(t, w, Allocation{ReservationID: resA, GPUs: gpus(0, 3)}, Allocation{ReservationID: resB, GPUs: gpus(1, 2)})
	if !slices.Equal(ch.Written, []string{resB}) || len(ch.Removed) != 0 {
		t.Fatalf("changes = %+v, want %s written", ch, resB)
	}
}

// TestRepairs checks that Sync restores what it owns: a file edited or
// deleted by hand, and the temp file of a Sync killed mid-write.
func TestRepairs(t *testing.T) {
	t.Parallel()
	w := setup(t)
	alloc := Allocation{ReservationID: resA, GPUs: gpus(0)}
	mustSync(t, w, alloc)
	want := dirState(t, w.Dir)
	spec := filepath.Join(w.Dir, "bettercompute-"+resA+".json")
	if err := os.WriteFile(spec, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.Dir, "bettercompute-"+resA+".env")); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(w.Dir, ".bettercompute-123.tmp")
	if err := os.WriteFile(tmp, []byte(`{"cdiVer`), 0o600); err != nil {
		t.Fatal(err)
	}
	ch := mustSync(t, w, alloc)
	if !slices.Equal(ch.Written, []string{resA}) {
		t.Fatalf("changes = %+v, want %s written", ch, resA)
	}
	got := dirState(t, w.Dir)
	if len(got) != len(want) {
		t.Fatalf("files = %v, want %v", got, want)
	}
	for name, content := range want {
		_, body, _ := strings.Cut(content, "\n")
		_, gotBody, _ := strings.Cut(got[name], "\n")
		if body != gotBody {
			t.Fatalf("%s = %q, want %q", name, gotBody, body)
		}
	}
}

func TestForeignFilesUntouched(t *testing.T) {
	t.Parallel()
	w := setup(t)
	if err := os.MkdirAll(filepath.Join(w.Dir, "bettercompute-"+resB+".json"), 0o755); err != nil {
		t.Fatal(err)
	}
	foreign := map[string]string{
		"nvidia.yaml":                                     "cdiVersion: 0.5.0\n",
		"bettercompute-notes.json":                        "{}",
		"bettercompute-" + resA + ".yaml":                 "kept",
		"bettercompute-R-AAAAAAAAAAAAAAAAAAAAAAAAAA.json": "kept",
		"my-bettercompute-" + resA + ".json":              "kept",
		".bettercompute-notes":                            "kept",
	}
	for name, body := range foreign {
		if err := os.WriteFile(filepath.Join(w.Dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := dirState(t, w.Dir)
	mustSync(t, w, Allocation{ReservationID: resA, GPUs: gpus(0)})
	mustSync(t, w)
	after := dirState(t, w.Dir)
	if !maps.Equal(before, after) {
		t.Fatalf("foreign files changed:\n%v\n%v", before, after)
	}
}
