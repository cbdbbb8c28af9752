package inventory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadFakeHWExamples(t *testing.T) {
	t.Parallel()
	for _, path := range []string{
		"../../../examples/fakehw/h100x8.yaml",
		"testdata/fakehw/minimal.yaml",
		"testdata/fakehw/a100x2-mig.yaml",
	} {
		hw, err := LoadFakeHW(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if hw.CPU.Threads == 0 || hw.MemoryGiB == 0 {
			t.Errorf("%s: no CPU or memory: %+v", path, hw)
		}
	}
	hw, err := LoadFakeHW("../../../examples/fakehw/h100x8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(hw.GPUs) != 8 || hw.GPUs[7].Model != "NVIDIA H100 80GB HBM3" || !hw.GPUs[7].MIGEnabled || !hw.AllowReboot ||
		*hw.GPUs[4].NUMANode != 1 || hw.NICs[1].SpeedMbps != 400000 || hw.GPUHealth[hw.GPUs[3].UUID] == "" {
		t.Errorf("h100x8.yaml read as %+v", hw)
	}
}

func TestParseFakeHWErrors(t *testing.T) {
	t.Parallel()
	const gpu = "GPU-4c1f8e2a-7b3d-9e05-a1c6-2f8d0b7e3a91"
	const base = "cpu: {model: x, sockets: 1, cores: 2, threads: 4}\nmemoryGiB: 16\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"empty", "", "fakehw: empty description"},
		{"bad YAML", "cpu: [1, 2\n", "fakehw: yaml: line 1: did not find expected ',' or ']'"},
		{"not a mapping", "- 1\n", "fakehw: json: cannot unmarshal array into Go value of type inventory.FakeHW"},
		{"unknown top-level field", base + "gpu: []\n", `fakehw: unknown field "gpu"`},
		{"unknown nested field", base + "gpus:\n- {uuid: " + gpu + ", model: m, memoryGB: 80}\n", `fakehw: unknown field "gpus[0].memoryGB"`},
		{"unknown CPU field", "cpu: {model: x, thread: 4}\n", `fakehw: unknown field "cpu.thread"`},
		{"duplicate key", base + "memoryGiB: 32\n", `fakehw: yaml: unmarshal errors: line 3: key "memoryGiB" already set in map`},
		{"wrong type", "cpu: {sockets: two}\n", "fakehw: json: cannot unmarshal string into Go struct field FakeCPU.cpu.sockets of type int"},
		{"negative memory", "memoryGiB: -1\n", "fakehw: memoryGiB: -1 is not a size"},
		{"negative GPU memory", base + "gpus:\n- {uuid: " + gpu + ", model: m, memoryGiB: -80}\n", "fakehw: gpus[0].memoryGiB: -80 is not a size"},
		{"negative disk size", base + "disks:\n- {name: sda, sizeGiB: -1}\n", "fakehw: disks[0].sizeGiB: -1 is not a size"},
		{"negative CPU count", "cpu: {sockets: -1}\n", "fakehw: cpu: negative count (sockets -1, cores 0, threads 0)"},
		{"more cores than threads", "cpu: {cores: 8, threads: 4}\n", "fakehw: cpu: 8 cores but only 4 threads"},
		{"GPU UUID without its prefix", base + "gpus:\n- {uuid: " + gpu[4:] + ", model: m}\n",
			`fakehw: gpus[0].uuid: "` + gpu[4:] + `" is not a GPU UUID`},
		{"duplicate GPU UUID", base + "gpus:\n- {uuid: " + gpu + ", model: m}\n- {uuid: " + gpu + ", model: m}\n",
			`fakehw: gpus[1]: duplicate GPU UUID "` + gpu + `" (also gpus[0])`},
		{"bad GPU UUID", base + "gpus:\n- {uuid: GPU-1234, model: m}\n", `fakehw: gpus[0].uuid: "GPU-1234" is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)`},
		{"GPU without model", base + "gpus:\n- {uuid: " + gpu + "}\n", `fakehw: gpus[0].model: missing`},
		{"duplicate PCI bus id", base + "gpus:\n- {uuid: " + gpu + ", model: m, pciBusId: 00000000:18:00.0}\n- {uuid: GPU-00000000-0000-0000-0000-000000000001, model: m, pciBusId: 00000000:18:00.0}\n",
			`fakehw: gpus[1]: duplicate PCI bus id "00000000:18:00.0" (also gpus[0])`},
		{"bad NUMA node", base + "gpus:\n- {uuid: " + gpu + ", model: m, numaNode: -2}\n", "fakehw: gpus[0].numaNode: -2 is not a NUMA node"},
		{"bad CPU list", base + "numa:\n- {id: 0, cpus: 0-x}\n", `fakehw: numa[0].cpus: "0-x" is not a CPU list such as 0-15,32-47`},
		{"duplicate NUMA id", base + "numa:\n- {id: 0}\n- {id: 0}\n", `fakehw: numa[1]: duplicate NUMA node id "0" (also numa[0])`},
		{"bad MAC", base + "nics:\n- {name: eth0, mac: zz}\n", `fakehw: nics[0].mac: "zz" is not a MAC address`},
		{"loopback NIC", base + "nics:\n- {name: lo}\n", `fakehw: nics[0].name: want a physical interface name such as eth0, not "lo"`},
		{"bad address", base + "nics:\n- {name: eth0, addresses: [10.0.0.1]}\n", `fakehw: nics[0].addresses: "10.0.0.1" is not in CIDR form`},
		{"disk without name", base + "disks:\n- {sizeGiB: 1}\n", `fakehw: disks[0].name: want a kernel name such as nvme0n1, not ""`},
		{"health of an unknown GPU", base + "gpuHealth: {" + gpu + ": ok}\n", `fakehw: gpuHealth: "` + gpu + `" is not one of the gpus`},
		{"bad machine id", base + "machineId: abc\n", `fakehw: machineId "abc": want 32 hexadecimal digits, as in /etc/machine-id`},
		{"bad hostname", base + "hostname: a b\n", `fakehw: hostname "a b": spaces, control characters and / are not allowed`},
	}
	for _, tt := range tests {
		hw, err := ParseFakeHW([]byte(tt.yaml))
		if err == nil {
			t.Errorf("%s: ParseFakeHW = %+v, want an error", tt.name, hw)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, tt.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error\n  %q\nwant one line starting\n  %q", tt.name, msg, tt.want)
		}
	}
}

func TestLoadFakeHWErrorsNameTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(path, []byte("cpu: {threads: 4}\nmemoryGiB: 8\ndisk: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFakeHW(path)
	if want := "fakehw " + path + `: unknown field "disk"`; err == nil || err.Error() != want {
		t.Errorf("LoadFakeHW = %v, want %q", err, want)
	}
	_, err = LoadFakeHW(filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !strings.HasPrefix(err.Error(), "error reading fakehw description: ") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("LoadFakeHW(missing) = %v", err)
	}
}

func TestGenerateFakeHW(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n     int
		model string
		mem   float64
	}{
		{8, "", 80}, {8, "NVIDIA H200", 141}, {4, "NVIDIA A100-SXM4-40GB", 40}, {1, "NVIDIA L40S", 48},
		{0, "", 0}, {16, "Some Future GPU", 80},
	} {
		hw := GenerateFakeHW("seed", 7, tt.n, tt.model)
		// A generated description passes the checks a loaded one does.
		if err := hw.validate(); err != nil {
			t.Errorf("GenerateFakeHW(n=%d, %q): %v", tt.n, tt.model, err)
		}
		if len(hw.GPUs) != tt.n {
			t.Fatalf("n=%d: %d GPUs", tt.n, len(hw.GPUs))
		}
		for _, g := range hw.GPUs {
			if g.MemoryGiB != tt.mem || (tt.model != "" && g.Model != tt.model) || (tt.model == "" && g.Model != DefaultFakeGPUModel) {
				t.Errorf("n=%d %q: GPU %+v", tt.n, tt.model, g)
			}
		}
		var numaCPUs int
		for _, n := range hw.NUMA {
			c, err := cpuListLen(n.CPUs)
			if err != nil {
				t.Fatal(err)
			}
			numaCPUs += c
		}
		if numaCPUs != hw.CPU.Threads {
			t.Errorf("n=%d: NUMA nodes hold %d CPUs of %d", tt.n, numaCPUs, hw.CPU.Threads)
		}
	}
	a, b := GenerateFakeHW("seed", 7, 8, ""), GenerateFakeHW("seed", 7, 8, "")
	for g := range a.GPUs {
		if a.GPUs[g].UUID != b.GPUs[g].UUID {
			t.Errorf("GPU %d: UUID %s then %s for the same arguments", g, a.GPUs[g].UUID, b.GPUs[g].UUID)
		}
	}
	if c := GenerateFakeHW("other", 7, 8, ""); c.GPUs[0].UUID == a.GPUs[0].UUID || c.MachineID == a.MachineID {
		t.Error("another seed gives the same identifiers")
	}
}

// TestGenerateFakeHWUnique: 10,000 nodes of 8 GPUs have 80,000 distinct GPU
// UUIDs, and distinct machine ids and MACs.
func TestGenerateFakeHWUnique(t *testing.T) {
	t.Parallel()
	const nodes, gpus = 10000, 8
	uuids := make(map[string]int, nodes*gpus)
	machines := make(map[string]bool, nodes)
	macs := make(map[string]bool, 2*nodes)
	for i := range nodes {
		hw := GenerateFakeHW("fleet-a", i, gpus, "")
		for _, g := range hw.GPUs {
			if !validGPUUUID(g.UUID) {
				t.Fatalf("node %d: %q is not a GPU UUID", i, g.UUID)
			}
			if prev, ok := uuids[g.UUID]; ok {
				t.Fatalf("node %d: GPU UUID %s also on node %d", i, g.UUID, prev)
			}
			uuids[g.UUID] = i
		}
		if machines[hw.MachineID] {
			t.Fatalf("node %d: machine id %s repeated", i, hw.MachineID)
		}
		machines[hw.MachineID] = true
		for _, n := range hw.NICs {
			if macs[n.MAC] {
				t.Fatalf("node %d: MAC %s repeated", i, n.MAC)
			}
			macs[n.MAC] = true
		}
	}
	if len(uuids) != nodes*gpus {
		t.Errorf("%d UUIDs, want %d", len(uuids), nodes*gpus)
	}
}
