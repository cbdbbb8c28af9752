package inventory

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"strconv"
)

// DefaultFakeGPUModel is the GPU GenerateFakeHW gives a node when asked for
// no model in particular.
const DefaultFakeGPUModel = "NVIDIA H100 80GB HBM3"

// gpuMemoryGiB is the framebuffer of models whose product name does not end
// in their size.
var gpuMemoryGiB = map[string]float64{
	"NVIDIA H100 80GB HBM3": 80,
	"NVIDIA H100 PCIe":      80,
	"NVIDIA H100 NVL":       94,
	"NVIDIA H200":           141,
	"NVIDIA H200 NVL":       141,
	"NVIDIA B200":           180,
	"NVIDIA GB200":          186,
	"NVIDIA L40S":           48,
	"NVIDIA L4":             24,
	"NVIDIA A10":            24,
	"Tesla T4":              16,
}

// sizeInName finds "80GB" in "NVIDIA A100-SXM4-80GB".
var sizeInName = regexp.MustCompile(`(\d+)GB`)

// hgxBusIDs are the PCI bus numbers of the eight GPUs of an HGX board, as
// nvidia-smi prints them on a common two-socket server.
var hgxBusIDs = []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

// GenerateFakeHW describes plausible hardware for simulated node i, with n
// GPUs of a model ("" for DefaultFakeGPUModel): a two-socket server (one
// socket under four GPUs) with memory, NUMA nodes, NVMe disks and NICs to
// match. Identifiers (GPU UUIDs, machine id, MAC addresses) are derived from
// (seed, i, index): the same arguments give the same description, and
// different ones give identifiers that do not collide, formatted like real
// ones. The node may reboot.
func GenerateFakeHW(seed string, i, n int, model string) *FakeHW {
	if model == "" {
		model = DefaultFakeGPUModel
	}
	n = max(n, 0)
	sockets := 2
	if n < 4 {
		sockets = 1
	}
	const coresPerSocket = 56
	memGiB := float64(max(256*n, 128)) // about 2 TiB for eight GPUs
	hw := &FakeHW{
		Hostname:  fmt.Sprintf("sim-%05d", i),
		MachineID: hex.EncodeToString(derive(seed, "machine-id", i, 0)[:16]),
		CPU: FakeCPU{
			Model:   "Intel(R) Xeon(R) Platinum 8480+",
			Sockets: sockets,
			Cores:   sockets * coresPerSocket,
			Threads: 2 * sockets * coresPerSocket,
		},
		MemoryGiB:     memGiB,
		DriverVersion: "550.90.07",
		CUDAVersion:   "12.4",
		AllowReboot:   true,
	}
	for s := range sockets {
		// Linux numbers the first thread of every core before the second.
		lo, hi := s*coresPerSocket, (s+1)*coresPerSocket-1
		all := sockets * coresPerSocket
		hw.NUMA = append(hw.NUMA, FakeNUMA{
			ID:        s,
			CPUs:      fmt.Sprintf("%d-%d,%d-%d", lo, hi, lo+all, hi+all),
			MemoryGiB: memGiB / float64(sockets),
		})
	}
	hw.Disks = []FakeDisk{{Name: "nvme0n1", SizeGiB: 894, Model: "SAMSUNG MZ1L2960HCJR-00A07"}}
	for d := range min(n/2, 4) {
		hw.Disks = append(hw.Disks, FakeDisk{
			Name: fmt.Sprintf("nvme%dn1", d+1), SizeGiB: 3576, Model: "SAMSUNG MZQL23T8HCLS-00A07",
		})
	}
	hw.NICs = []FakeNIC{{Name: "eno1", MAC: fakeMAC(seed, i, 0), SpeedMbps: 25000, MTU: 1500}}
	if n > 0 {
		hw.NICs = append(hw.NICs, FakeNIC{Name: "ens1f0np0", MAC: fakeMAC(seed, i, 1), SpeedMbps: 200000, MTU: 9000})
	}
	mem := fakeGPUMemoryGiB(model)
	for g := range n {
		numa := g * sockets / n
		bus := 0x100 - n + g // past the HGX layout, count down from ff
		if g < len(hgxBusIDs) && n <= len(hgxBusIDs) {
			bus = hgxBusIDs[g]
		}
		hw.GPUs = append(hw.GPUs, FakeGPU{
			UUID:      FakeGPUUUID(seed, i, g),
			Model:     model,
			MemoryGiB: mem,
			PCIBusID:  fmt.Sprintf("%08X:%02X:00.0", g/256, bus&0xff),
			NUMANode:  &numa,
		})
	}
	return hw
}

// FakeGPUUUID is the UUID GenerateFakeHW gives GPU g of simulated node i.
func FakeGPUUUID(seed string, i, g int) string {
	b := derive(seed, "gpu", i, g)
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// fakeMAC is a locally administered unicast address for NIC k of node i.
func fakeMAC(seed string, i, k int) string {
	b := derive(seed, "mac", i, k)
	b[0] = b[0]&^0x01 | 0x02
	return net.HardwareAddr(b[:6]).String()
}

// derive hashes (seed, kind, i, j) unambiguously: every part is length- or
// width-prefixed, so distinct inputs never hash the same bytes.
func derive(seed, kind string, i, j int) []byte {
	h := sha256.New()
	var buf [8]byte
	for _, s := range []string{seed, kind} {
		binary.BigEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	for _, v := range []int{i, j} {
		binary.BigEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	return h.Sum(nil)
}

// fakeGPUMemoryGiB is a model's framebuffer: known, or read from the name,
// or 80.
func fakeGPUMemoryGiB(model string) float64 {
	if g, ok := gpuMemoryGiB[model]; ok {
		return g
	}
	if m := sizeInName.FindStringSubmatch(model); m != nil {
		if g, err := strconv.Atoi(m[1]); err == nil && g > 0 && g < 1<<20 {
			return float64(g)
		}
	}
	return 80
}
