package inventory

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

const fixtureHost = "testdata/hosts/two-socket"

// fakeNvidiaSMI writes an nvidia-smi stand-in that runs body (a shell
// script) when called as `nvidia-smi -q -x`, and returns its path.
func fakeNvidiaSMI(t *testing.T, body string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("needs a POSIX shell")
	}
	p := filepath.Join(t.TempDir(), "nvidia-smi")
	script := "#!/bin/sh\n" +
		`[ "$*" = "-q -x" ] || { echo "unexpected arguments: $*" >&2; exit 2; }` + "\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// catFixture is a fake nvidia-smi that prints an XML fixture.
func catFixture(t *testing.T, name string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("testdata", "nvidia-smi", name))
	if err != nil {
		t.Fatal(err)
	}
	return fakeNvidiaSMI(t, "exec cat '"+abs+"'")
}

func TestCollectFixtureHost(t *testing.T) {
	t.Parallel()
	smi := catFixture(t, "a100-sxm4-80gb-x8-driver-535.129.03.xml")
	inv, err := Collect(context.Background(), Options{Root: fixtureHost, NvidiaSMI: smi})
	if err != nil {
		t.Fatal(err)
	}
	assertProto(t, "host", inv.Host, &agentv1.Host{
		Hostname:  "gpu-node-07",
		MachineId: "6c3f9a0e2b7d41c58e1f0a9b3d7c2e64",
		BootId:    "0f4c2e8a-7b1d-4e93-a6c5-2d8f1b9e3a70",
		Kernel:    "5.15.0-105-generic",
		Os:        "Ubuntu 22.04.4 LTS",
		Arch:      runtime.GOARCH,
	})
	assertProto(t, "cpu", inv.Cpu, &agentv1.CPU{
		Model:   "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
		Sockets: 2,
		Cores:   4,
		Threads: 8,
		NumaNodes: []*agentv1.NUMANode{
			{Id: 0, Cpus: "0-1,4-5", MemoryBytes: 131895032 << 10},
			{Id: 1, Cpus: "2-3,6-7", MemoryBytes: 131961088 << 10},
		},
	})
	assertProto(t, "memory", inv.Memory, &agentv1.Memory{
		TotalBytes: 263856120 << 10,
		HugePages: []*agentv1.HugePages{
			{PageSizeBytes: 2 << 20, Total: 1024, Free: 1000},
			{PageSizeBytes: 1 << 30, Total: 4, Free: 4},
		},
	})
	assertProto(t, "disks", &agentv1.Inventory{Disks: inv.Disks}, &agentv1.Inventory{Disks: []*agentv1.Disk{
		{Name: "nvme0n1", SizeBytes: 7501476528 * 512, Model: "SAMSUNG MZQL23T8HCLS-00A07"},
		{Name: "sda", SizeBytes: 7814037168 * 512, Model: "ST4000NM0035-1V4", Rotational: true},
	}})
	// No addresses: the fixture is not the live host.
	assertProto(t, "nics", &agentv1.Inventory{Nics: inv.Nics}, &agentv1.Inventory{Nics: []*agentv1.NIC{
		{Name: "eno1", Mac: "3c:ec:ef:4a:91:0e", SpeedMbps: 25000, Mtu: 1500},
		{Name: "ens1f1np1", Mac: "3c:ec:ef:4a:91:0f", Mtu: 9000},
	}})
	if g := inv.Gpus; g.DriverVersion != "535.129.03" || len(g.Devices) != 8 || g.Devices[0].NumaNode != -1 {
		t.Errorf("gpus: %s", prototext.Format(g))
	}
}

// TestCollectGPUNUMA reads the GPUs' NUMA nodes from sysfs, on a root that
// holds nothing else: every other read degrades to an empty field.
func TestCollectGPUNUMA(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for bdf, node := range map[string]string{"0000:18:00.0": "0", "0000:2a:00.0": "0", "0000:3a:00.0": "1"} {
		dir := filepath.Join(root, "sys/bus/pci/devices", bdf)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(node+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	smi := catFixture(t, "h100-80gb-hbm3-x4-mig-driver-575.57.08.xml")
	inv, err := Collect(context.Background(), Options{Root: root, NvidiaSMI: smi})
	if err != nil {
		t.Fatal(err)
	}
	var got []int32
	for _, d := range inv.Gpus.Devices {
		got = append(got, d.NumaNode)
	}
	if want := []int32{0, 0, 1, -1}; !slicesEqual(got, want) {
		t.Errorf("GPU NUMA nodes %v, want %v (5d:00.0 has no sysfs entry)", got, want)
	}
	assertProto(t, "cpu", inv.Cpu, &agentv1.CPU{})
	assertProto(t, "memory", inv.Memory, &agentv1.Memory{})
	if inv.Host.Hostname != "" || len(inv.Disks) != 0 || len(inv.Nics) != 0 {
		t.Errorf("an empty root gave host %v, disks %v, nics %v", inv.Host, inv.Disks, inv.Nics)
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCollectWithoutGPUs covers the ways a host has no GPUs to report: no
// nvidia-smi, one that finds none, one that fails, one that hangs past the
// caller's deadline, one that prints garbage. None fails the inventory.
func TestCollectWithoutGPUs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		smi    func(t *testing.T) string
		driver string
	}{
		{"absent", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nvidia-smi") }, ""},
		{"no GPU attached", func(t *testing.T) string { return catFixture(t, "no-gpu-driver-550.90.07.xml") }, "550.90.07"},
		{"no devices found", func(t *testing.T) string {
			return fakeNvidiaSMI(t, `echo "No devices were found"; exit 6`)
		}, ""},
		{"driver not loaded", func(t *testing.T) string {
			return fakeNvidiaSMI(t, `echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2; exit 9`)
		}, ""},
		{"hangs", func(t *testing.T) string { return fakeNvidiaSMI(t, "exec sleep 60") }, ""},
		{"garbage", func(t *testing.T) string { return fakeNvidiaSMI(t, "echo '<nvidia_smi_log><gpu>'") }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			inv, err := Collect(ctx, Options{Root: fixtureHost, NvidiaSMI: tt.smi(t)})
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Collect took %v", d)
			}
			assertProto(t, "gpus", inv.Gpus, &agentv1.GPUs{DriverVersion: tt.driver, CudaVersion: map[string]string{"550.90.07": "12.4"}[tt.driver]})
			if inv.Cpu.GetThreads() != 8 {
				t.Errorf("the rest of the inventory went missing: %v", inv.Cpu)
			}
		})
	}
}

// TestGPUsUnreadable: GPUs, which binding devices relies on, tells GPUs it
// cannot read from none: an nvidia-smi that runs and fails is an error
// there, where Collect reports no GPUs.
func TestGPUsUnreadable(t *testing.T) {
	t.Parallel()
	hw := GenerateFakeHW("t", 0, 2, "")
	tests := []struct {
		name    string
		o       Options
		devices int
		fails   bool
	}{
		{"absent", Options{NvidiaSMI: filepath.Join(t.TempDir(), "nvidia-smi")}, 0, false},
		{"no GPU attached", Options{NvidiaSMI: catFixture(t, "no-gpu-driver-550.90.07.xml")}, 0, false},
		{"eight", Options{NvidiaSMI: catFixture(t, "a100-sxm4-80gb-x8-driver-535.129.03.xml")}, 8, false},
		{"fakehw", Options{NvidiaSMI: fakeNvidiaSMI(t, "exit 1"), FakeHW: hw}, 2, false},
		{"driver not loaded", Options{NvidiaSMI: fakeNvidiaSMI(t, "echo 'NVIDIA-SMI has failed' >&2; exit 9")}, 0, true},
		{"garbage", Options{NvidiaSMI: fakeNvidiaSMI(t, "echo '<nvidia_smi_log><gpu>'")}, 0, true},
	}
	for _, tt := range tests {
		tt.o.Root = fixtureHost
		g, err := GPUs(context.Background(), tt.o)
		if (err != nil) != tt.fails || len(g.GetDevices()) != tt.devices {
			t.Errorf("%s: %d GPUs, error %v; want %d, an error: %v", tt.name, len(g.GetDevices()), err, tt.devices, tt.fails)
		}
	}
}

// TestCollectLiveHost reads the machine the test runs on, which has no
// nvidia-smi; on Linux it must find at least a CPU, memory and its identity.
func TestCollectLiveHost(t *testing.T) {
	t.Parallel()
	inv, err := Collect(context.Background(), Options{NvidiaSMI: filepath.Join(t.TempDir(), "no-nvidia-smi")})
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "linux" {
		return
	}
	if inv.Host.Hostname == "" || inv.Host.Kernel == "" || inv.Host.BootId == "" || inv.Host.Arch != runtime.GOARCH {
		t.Errorf("host: %v", inv.Host)
	}
	if inv.Cpu.Threads < 1 || inv.Memory.TotalBytes <= 0 {
		t.Errorf("cpu %v, memory %v", inv.Cpu, inv.Memory)
	}
	if len(inv.Gpus.GetDevices()) != 0 {
		t.Errorf("GPUs without nvidia-smi: %v", inv.Gpus)
	}
	for _, d := range inv.Disks {
		for _, p := range virtualDisks {
			if strings.HasPrefix(d.Name, p) {
				t.Errorf("virtual disk %s reported", d.Name)
			}
		}
	}
	for _, n := range inv.Nics {
		if n.Name == "lo" {
			t.Error("loopback reported")
		}
	}
	t.Logf("live host: %s", prototext.Format(inv))
}

func TestCollectRefuses(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		root string
		want string
	}{
		{"missing root", context.Background(), filepath.Join(t.TempDir(), "nope"), "error reading inventory root: "},
		{"root is a file", context.Background(), file, "is not a directory"},
		{"context done", canceled, fixtureHost, "context canceled"},
	}
	for _, tt := range tests {
		if inv, err := Collect(tt.ctx, Options{Root: tt.root}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Collect = %v, %v; want an error with %q", tt.name, inv, err, tt.want)
		}
	}
}

func TestCollectFakeHW(t *testing.T) {
	t.Parallel()
	hw, err := LoadFakeHW("testdata/fakehw/a100x2-mig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// nvidia-smi would fail the test if run: fakehw replaces it.
	smi := fakeNvidiaSMI(t, "echo called >&2; exit 1")
	inv, err := Collect(context.Background(), Options{Root: fixtureHost, NvidiaSMI: smi, FakeHW: hw})
	if err != nil {
		t.Fatal(err)
	}
	want := &agentv1.Inventory{
		Host: &agentv1.Host{
			Hostname:  "sim-a100-02",                      // from the description
			MachineId: "0a1b2c3d4e5f60718293a4b5c6d7e8f9", // from the description
			BootId:    "0f4c2e8a-7b1d-4e93-a6c5-2d8f1b9e3a70",
			Kernel:    "5.15.0-105-generic",
			Os:        "Ubuntu 22.04.4 LTS",
			Arch:      runtime.GOARCH,
			Fake:      true,
		},
		Cpu: &agentv1.CPU{
			Model: "AMD EPYC 7742 64-Core Processor", Sockets: 2, Cores: 128, Threads: 256,
			NumaNodes: []*agentv1.NUMANode{
				{Id: 0, Cpus: "0-63,128-191", MemoryBytes: 512 << 30},
				{Id: 1, Cpus: "64-127,192-255", MemoryBytes: 512 << 30},
			},
		},
		Memory: &agentv1.Memory{TotalBytes: 1024 << 30},
		Disks: []*agentv1.Disk{
			{Name: "nvme0n1", SizeBytes: 17885 << 30 / 10, Model: "SAMSUNG MZ1LB1T9HALS-00007"},
			{Name: "sda", SizeBytes: 7452 << 30, Model: "ST8000NM000A-2KE1", Rotational: true},
		},
		Nics: []*agentv1.NIC{
			{Name: "enp65s0f0", Mac: "0c:42:a1:5e:77:10", SpeedMbps: 100000, Mtu: 9000},
			{Name: "enp65s0f1", Mac: "0c:42:a1:5e:77:11", Mtu: 1500},
		},
		Gpus: &agentv1.GPUs{DriverVersion: "535.129.03", CudaVersion: "12.2", Devices: []*agentv1.GPU{
			{
				Index: 0, Uuid: "GPU-5f0e1c2a-83b4-4d6e-9a7f-0b1c2d3e4f50", Name: "NVIDIA A100-SXM4-80GB",
				PciBusId: "00000000:07:00.0", MemoryBytes: 80 << 30, MigEnabled: true, MigPending: true,
				EccErrors: ecc(0, 0, 0, 0), NumaNode: 0, DevicePath: "/dev/nvidia0",
			},
			{
				Index: 1, Uuid: "GPU-a9b8c7d6-e5f4-4321-8765-fedcba987654", Name: "NVIDIA A100-SXM4-80GB",
				PciBusId: "00000000:87:00.0", MemoryBytes: 80 << 30,
				EccErrors: ecc(0, 0, 0, 0), NumaNode: -1, DevicePath: "/dev/nvidia1",
			},
		}},
	}
	assertProto(t, "inventory", inv, want)
}

func TestParseCPUInfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []cpuProc
	}{
		{"empty", "", nil},
		{"x86 with topology", "processor\t: 0\nmodel name\t: Xeon\nphysical id\t: 1\ncore id\t\t: 3\n\nprocessor\t: 1\nmodel name\t: Xeon\nphysical id\t: 1\ncore id\t\t: 3\n",
			[]cpuProc{{id: "0", model: "Xeon", pkg: "1", core: "3", topology: true}, {id: "1", model: "Xeon", pkg: "1", core: "3", topology: true}}},
		{"arm64 without topology or model name", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n\nprocessor\t: 1\nCPU part\t: 0xd4f\n",
			[]cpuProc{{id: "0"}, {id: "1"}}},
		{"header lines before the first processor", "Hardware\t: BCM2835\nprocessor\t: 0\nModel\t: Raspberry Pi 4\n",
			[]cpuProc{{id: "0", model: "Raspberry Pi 4"}}},
	}
	for _, tt := range tests {
		if got := parseCPUInfo(tt.in); !slicesEqual(got, tt.want) {
			t.Errorf("%s: parseCPUInfo = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestCPUTopologyFromSysfs reads sockets and cores from sysfs when cpuinfo
// has no topology, and logical CPUs from sysfs when there is no cpuinfo.
func TestCPUTopologyFromSysfs(t *testing.T) {
	t.Parallel()
	write := func(root, p, s string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	topo := func(root string) {
		// 2 packages x 2 cores x 1 thread, cpu10 sorting after cpu2.
		for cpu, pc := range map[string][2]string{"0": {"0", "0"}, "1": {"0", "1"}, "2": {"1", "0"}, "10": {"1", "1"}} {
			write(root, "sys/devices/system/cpu/cpu"+cpu+"/topology/physical_package_id", pc[0])
			write(root, "sys/devices/system/cpu/cpu"+cpu+"/topology/core_id", pc[1])
		}
	}
	withInfo := t.TempDir()
	topo(withInfo)
	write(withInfo, "proc/cpuinfo", "processor\t: 0\nCPU part\t: 0xd4f\n\nprocessor\t: 1\n\nprocessor\t: 2\n\nprocessor\t: 10\n")
	withoutInfo := t.TempDir()
	topo(withoutInfo)

	for name, root := range map[string]string{"cpuinfo without topology": withInfo, "no cpuinfo": withoutInfo} {
		h, err := newHost(Options{Root: root})
		if err != nil {
			t.Fatal(err)
		}
		assertProto(t, name, h.cpu(), &agentv1.CPU{Sockets: 2, Cores: 4, Threads: 4})
	}
}

func TestUnitParsers(t *testing.T) {
	t.Parallel()
	kibTests := []struct {
		v    string
		unit []string
		want int64
	}{
		{"263856120", []string{"kB"}, 263856120 << 10},
		{"1024", nil, 1024},
		{"-5", []string{"kB"}, 0},
		{"x", []string{"kB"}, 0},
		{"9223372036854775807", []string{"kB"}, 0},
	}
	for _, tt := range kibTests {
		if got := kib(tt.v, tt.unit); got != tt.want {
			t.Errorf("kib(%q, %q) = %d, want %d", tt.v, tt.unit, got, tt.want)
		}
	}
	mibTests := map[string]int64{
		"81559 MiB": 81559 << 20, " 4 GiB ": 4 << 30, "512 KiB": 512 << 10, "7": 7 << 20,
		"N/A": 0, "": 0, "-1 MiB": 0, "[Unknown Error]": 0, "9223372036854775807 MiB": 0,
	}
	for in, want := range mibTests {
		if got := mib(in); got != want {
			t.Errorf("mib(%q) = %d, want %d", in, got, want)
		}
	}
	for in, want := range map[string]int{"0-15,32-47": 32, "3": 1, "": 0, "0-1,4-5": 4} {
		if got, err := cpuListLen(in); err != nil || got != want {
			t.Errorf("cpuListLen(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"a", "5-3", "-1", "0-", "1,,x"} {
		if _, err := cpuListLen(in); err == nil {
			t.Errorf("cpuListLen(%q) accepted", in)
		}
	}
}
