package inventory

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// FakeHW is a YAML description of fake hardware, for `bcd node --fakehw` and
// `bcd sim`: it replaces the hardware edge of the inventory, and nothing
// else. See examples/fakehw/h100x8.yaml.
type FakeHW struct {
	// Hostname replaces the host's name; "" keeps the real one.
	Hostname string `json:"hostname,omitempty"`
	// MachineID replaces /etc/machine-id; "" keeps the real one. Simulated
	// nodes sharing one host each need their own.
	MachineID string `json:"machineId,omitempty"`
	// CPU is the processors.
	CPU FakeCPU `json:"cpu"`
	// MemoryGiB is the RAM.
	MemoryGiB float64 `json:"memoryGiB"`
	// NUMA is the NUMA nodes.
	NUMA []FakeNUMA `json:"numa,omitempty"`
	// Disks is the whole disks.
	Disks []FakeDisk `json:"disks,omitempty"`
	// NICs is the physical network interfaces.
	NICs []FakeNIC `json:"nics,omitempty"`
	// GPUs is the GPUs, in nvidia-smi's index order.
	GPUs []FakeGPU `json:"gpus,omitempty"`
	// DriverVersion is the NVIDIA driver version, such as "550.90.07".
	DriverVersion string `json:"driverVersion,omitempty"`
	// CUDAVersion is the CUDA version the driver supports, such as "12.4".
	CUDAVersion string `json:"cudaVersion,omitempty"`
	// AllowReboot lets node.reboot "reboot" this fake node (bcd restarts its
	// session instead of asking systemd).
	AllowReboot bool `json:"allowReboot,omitempty"`
	// GPUHealth is what diag.nvml reports per GPU UUID: "ok" or a problem
	// such as "xid 79: fallen off the bus". A GPU not listed is ok.
	GPUHealth map[string]string `json:"gpuHealth,omitempty"`
}

// FakeCPU describes the processors.
type FakeCPU struct {
	// Model is the model name, as /proc/cpuinfo prints it.
	Model string `json:"model"`
	// Sockets is the physical packages.
	Sockets int `json:"sockets"`
	// Cores is the physical cores, all sockets.
	Cores int `json:"cores"`
	// Threads is the logical CPUs.
	Threads int `json:"threads"`
}

// FakeNUMA is one NUMA node.
type FakeNUMA struct {
	// ID is the node's id.
	ID int `json:"id"`
	// CPUs is its logical CPUs as a kernel CPU list, such as "0-55,112-167".
	CPUs string `json:"cpus"`
	// MemoryGiB is its memory.
	MemoryGiB float64 `json:"memoryGiB"`
}

// FakeDisk is one whole disk.
type FakeDisk struct {
	// Name is the kernel name, such as "nvme0n1".
	Name string `json:"name"`
	// SizeGiB is the size.
	SizeGiB float64 `json:"sizeGiB"`
	// Model is the model, as sysfs reports it.
	Model string `json:"model,omitempty"`
	// Rotational is true for spinning disks.
	Rotational bool `json:"rotational,omitempty"`
}

// FakeNIC is one physical network interface.
type FakeNIC struct {
	// Name is the interface name.
	Name string `json:"name"`
	// MAC is the hardware address.
	MAC string `json:"mac,omitempty"`
	// SpeedMbps is the link speed; 0 when down or unknown.
	SpeedMbps int `json:"speedMbps,omitempty"`
	// MTU defaults to 1500.
	MTU int `json:"mtu,omitempty"`
	// Addresses are IP addresses in CIDR form.
	Addresses []string `json:"addresses,omitempty"`
}

// FakeGPU is one GPU.
type FakeGPU struct {
	// UUID is the GPU's UUID, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
	UUID string `json:"uuid"`
	// Model is nvidia-smi's product name, such as "NVIDIA H100 80GB HBM3".
	Model string `json:"model"`
	// MemoryGiB is the framebuffer memory.
	MemoryGiB float64 `json:"memoryGiB"`
	// PCIBusID is nvidia-smi's form of the PCI address, "00000000:18:00.0".
	PCIBusID string `json:"pciBusId,omitempty"`
	// NUMANode is the NUMA node the GPU sits on; omitted means unknown.
	NUMANode *int `json:"numaNode,omitempty"`
	// MIGEnabled is whether MIG mode is on.
	MIGEnabled bool `json:"migEnabled,omitempty"`
}

const gib = 1 << 30

// LoadFakeHW reads and checks a fakehw description file. Errors are one
// line, naming the file and, for a bad field, its path in the document.
func LoadFakeHW(path string) (*FakeHW, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading fakehw description: %w", err)
	}
	return parseFakeHW(b, path)
}

// ParseFakeHW reads and checks a fakehw description. Unknown fields are
// refused, with their path in the document.
func ParseFakeHW(data []byte) (*FakeHW, error) { return parseFakeHW(data, "") }

func parseFakeHW(data []byte, file string) (*FakeHW, error) {
	fail := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		msg = strings.Join(strings.Fields(msg), " ") // one line
		if file == "" {
			return fmt.Errorf("fakehw: %s", msg)
		}
		return fmt.Errorf("fakehw %s: %s", file, msg)
	}
	// YAMLToJSONStrict refuses duplicate keys.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fail("%s", strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
	}
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return nil, fail("%s", err)
	}
	if generic == nil {
		return nil, fail("empty description")
	}
	if err := unknownFields(generic, reflect.TypeFor[FakeHW](), ""); err != nil {
		return nil, fail("%s", err)
	}
	var hw FakeHW
	if err := json.Unmarshal(js, &hw); err != nil {
		return nil, fail("%s", err)
	}
	if err := hw.validate(); err != nil {
		return nil, fail("%s", err)
	}
	return &hw, nil
}

// unknownFields walks a decoded document alongside the Go type it decodes
// into and names the first key the type has no field for.
func unknownFields(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return nil // a type error, which decoding reports
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[name] = f.Type
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("unknown field %q", join(path, k))
			}
			if err := unknownFields(m[k], ft, join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			return nil
		}
		for i, e := range s {
			if err := unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// validate checks what YAML types cannot: sizes, uniqueness and formats.
func (hw *FakeHW) validate() error {
	if strings.ContainsFunc(hw.Hostname, func(r rune) bool { return r <= ' ' || r == '/' }) {
		return fmt.Errorf("hostname %q: spaces, control characters and / are not allowed", hw.Hostname)
	}
	if hw.MachineID != "" && !isHex(hw.MachineID, 32) {
		return fmt.Errorf("machineId %q: want 32 hexadecimal digits, as in /etc/machine-id", hw.MachineID)
	}
	c := hw.CPU
	switch {
	case c.Sockets < 0 || c.Cores < 0 || c.Threads < 0:
		return fmt.Errorf("cpu: negative count (sockets %d, cores %d, threads %d)", c.Sockets, c.Cores, c.Threads)
	case c.Cores > 0 && c.Sockets > c.Cores:
		return fmt.Errorf("cpu: %d sockets but only %d cores", c.Sockets, c.Cores)
	case c.Threads > 0 && c.Cores > c.Threads:
		return fmt.Errorf("cpu: %d cores but only %d threads", c.Cores, c.Threads)
	}
	if err := size("memoryGiB", hw.MemoryGiB); err != nil {
		return err
	}
	seen := map[string]string{}
	// unique checks that key, a normalized form of value, is new.
	unique := func(kind, key, value, at string) error {
		if prev, ok := seen[kind+"\x00"+key]; ok {
			return fmt.Errorf("%s: duplicate %s %q (also %s)", at, kind, value, prev)
		}
		seen[kind+"\x00"+key] = at
		return nil
	}
	for i, n := range hw.NUMA {
		at := fmt.Sprintf("numa[%d]", i)
		if n.ID < 0 {
			return fmt.Errorf("%s.id: negative (%d)", at, n.ID)
		}
		if _, err := cpuListLen(n.CPUs); err != nil {
			return fmt.Errorf("%s.cpus: %w", at, err)
		}
		if err := cmpErr(size(at+".memoryGiB", n.MemoryGiB), unique("NUMA node id", strconv.Itoa(n.ID), strconv.Itoa(n.ID), at)); err != nil {
			return err
		}
	}
	for i, d := range hw.Disks {
		at := fmt.Sprintf("disks[%d]", i)
		if d.Name == "" || strings.ContainsAny(d.Name, "/ ") {
			return fmt.Errorf("%s.name: want a kernel name such as nvme0n1, not %q", at, d.Name)
		}
		if err := cmpErr(size(at+".sizeGiB", d.SizeGiB), unique("disk name", d.Name, d.Name, at)); err != nil {
			return err
		}
	}
	for i, n := range hw.NICs {
		at := fmt.Sprintf("nics[%d]", i)
		if n.Name == "" || n.Name == "lo" || strings.ContainsAny(n.Name, "/ ") {
			return fmt.Errorf("%s.name: want a physical interface name such as eth0, not %q", at, n.Name)
		}
		if n.MAC != "" {
			if _, err := net.ParseMAC(n.MAC); err != nil {
				return fmt.Errorf("%s.mac: %q is not a MAC address", at, n.MAC)
			}
		}
		if n.SpeedMbps < 0 || n.SpeedMbps > math.MaxInt32 || n.MTU < 0 || n.MTU > math.MaxInt32 {
			return fmt.Errorf("%s: speedMbps (%d) and mtu (%d) must be 0 or more", at, n.SpeedMbps, n.MTU)
		}
		for _, a := range n.Addresses {
			if _, _, err := net.ParseCIDR(a); err != nil {
				return fmt.Errorf("%s.addresses: %q is not in CIDR form", at, a)
			}
		}
		if err := unique("NIC name", n.Name, n.Name, at); err != nil {
			return err
		}
	}
	for i, g := range hw.GPUs {
		at := fmt.Sprintf("gpus[%d]", i)
		if !validGPUUUID(g.UUID) {
			return fmt.Errorf("%s.uuid: %q is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", at, g.UUID)
		}
		if strings.TrimSpace(g.Model) == "" {
			return fmt.Errorf("%s.model: missing (nvidia-smi's product name, such as \"NVIDIA H100 80GB HBM3\")", at)
		}
		if g.NUMANode != nil && (*g.NUMANode < -1 || *g.NUMANode > math.MaxInt32) {
			return fmt.Errorf("%s.numaNode: %d is not a NUMA node", at, *g.NUMANode)
		}
		err := cmpErr(size(at+".memoryGiB", g.MemoryGiB), unique("GPU UUID", strings.ToLower(g.UUID), g.UUID, at))
		if err == nil && g.PCIBusID != "" {
			err = unique("PCI bus id", strings.ToLower(g.PCIBusID), g.PCIBusID, at)
		}
		if err != nil {
			return err
		}
	}
	for _, uuid := range sortedKeys(hw.GPUHealth) {
		if _, ok := seen["GPU UUID\x00"+strings.ToLower(uuid)]; !ok {
			return fmt.Errorf("gpuHealth: %q is not one of the gpus", uuid)
		}
	}
	return nil
}

// size checks a size in GiB.
func size(at string, v float64) error {
	if v < 0 || math.IsNaN(v) || v*gib > math.MaxInt64/2 {
		return fmt.Errorf("%s: %v is not a size", at, v)
	}
	return nil
}

// cmpErr returns the first error.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// validGPUUUID checks the form GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func validGPUUUID(s string) bool {
	rest, ok := strings.CutPrefix(s, "GPU-")
	parts := strings.Split(rest, "-")
	if !ok || len(parts) != 5 {
		return false
	}
	for i, n := range []int{8, 4, 4, 4, 12} {
		if !isHex(parts[i], n) {
			return false
		}
	}
	return true
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

// cpuListLen counts the CPUs in a kernel CPU list such as "0-15,32-47".
func cpuListLen(s string) (int, error) {
	n := 0
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(lo)
		b, errB := a, error(nil)
		if isRange {
			b, errB = strconv.Atoi(hi)
		}
		if errA != nil || errB != nil || a < 0 || b < a {
			return 0, fmt.Errorf("%q is not a CPU list such as 0-15,32-47", s)
		}
		n += b - a + 1
	}
	return n, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// apply puts the described hardware into an inventory whose host section
// was read from the real host.
func (hw *FakeHW) apply(inv *agentv1.Inventory) {
	inv.Host.Fake = true
	if hw.Hostname != "" {
		inv.Host.Hostname = hw.Hostname
	}
	if hw.MachineID != "" {
		inv.Host.MachineId = hw.MachineID
	}
	inv.Cpu = &agentv1.CPU{
		Model:   hw.CPU.Model,
		Sockets: int32(hw.CPU.Sockets),
		Cores:   int32(hw.CPU.Cores),
		Threads: int32(hw.CPU.Threads),
	}
	for _, n := range hw.NUMA {
		inv.Cpu.NumaNodes = append(inv.Cpu.NumaNodes, &agentv1.NUMANode{
			Id: int32(n.ID), Cpus: n.CPUs, MemoryBytes: bytesOf(n.MemoryGiB),
		})
	}
	inv.Memory = &agentv1.Memory{TotalBytes: bytesOf(hw.MemoryGiB)}
	for _, d := range hw.Disks {
		inv.Disks = append(inv.Disks, &agentv1.Disk{
			Name: d.Name, SizeBytes: bytesOf(d.SizeGiB), Model: d.Model, Rotational: d.Rotational,
		})
	}
	for _, n := range hw.NICs {
		mtu := n.MTU
		if mtu == 0 {
			mtu = 1500
		}
		inv.Nics = append(inv.Nics, &agentv1.NIC{
			Name: n.Name, Mac: n.MAC, SpeedMbps: int32(n.SpeedMbps), Mtu: int32(mtu),
			Addresses: append([]string(nil), n.Addresses...),
		})
	}
	inv.Gpus = hw.gpus()
}

// gpus is the described GPUs.
func (hw *FakeHW) gpus() *agentv1.GPUs {
	out := &agentv1.GPUs{DriverVersion: hw.DriverVersion, CudaVersion: hw.CUDAVersion}
	for i, g := range hw.GPUs {
		numa := int32(-1)
		if g.NUMANode != nil {
			numa = int32(*g.NUMANode)
		}
		out.Devices = append(out.Devices, &agentv1.GPU{
			Index:       int32(i),
			Uuid:        g.UUID,
			Name:        g.Model,
			PciBusId:    g.PCIBusID,
			MemoryBytes: bytesOf(g.MemoryGiB),
			MigEnabled:  g.MIGEnabled,
			MigPending:  g.MIGEnabled,
			EccErrors:   &agentv1.ECCErrors{},
			NumaNode:    numa,
			DevicePath:  "/dev/nvidia" + strconv.Itoa(i),
		})
	}
	return out
}

// bytesOf converts GiB to bytes.
func bytesOf(g float64) int64 { return int64(math.Round(g * gib)) }
