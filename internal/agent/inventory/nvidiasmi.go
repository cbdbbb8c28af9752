package inventory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// nvidiaSMITimeout bounds one nvidia-smi run: a GPU fallen off the bus can
// make it hang for minutes.
const nvidiaSMITimeout = 20 * time.Second

// smiLog is the part of `nvidia-smi -q -x` that bcd reads. Element names
// follow the nvsmi_device_v10 to v12 DTDs (drivers 418 to 575); elements a
// driver does not print stay empty.
type smiLog struct {
	XMLName       xml.Name `xml:"nvidia_smi_log"`
	DriverVersion string   `xml:"driver_version"`
	CUDAVersion   string   `xml:"cuda_version"`
	GPUs          []smiGPU `xml:"gpu"`
}

// smiGPU is one <gpu>.
type smiGPU struct {
	ID          string `xml:"id,attr"` // the PCI bus id
	ProductName string `xml:"product_name"`
	UUID        string `xml:"uuid"`
	Serial      string `xml:"serial"`
	VBIOS       string `xml:"vbios_version"`
	MinorNumber string `xml:"minor_number"`
	PCIBusID    string `xml:"pci>pci_bus_id"`
	FBTotal     string `xml:"fb_memory_usage>total"`
	MIGCurrent  string `xml:"mig_mode>current_mig"`
	MIGPending  string `xml:"mig_mode>pending_mig"`
	// MIGDevices holds one entry per MIG device; a GPU without them prints
	// the text "None" inside <mig_devices>, which leaves this empty.
	MIGDevices []smiMIG `xml:"mig_devices>mig_device"`
	Volatile   smiECC   `xml:"ecc_errors>volatile"`
	Aggregate  smiECC   `xml:"ecc_errors>aggregate"`

	// Health, for HealthSummary.
	Temp           string `xml:"temperature>gpu_temp"`
	RetiredSBE     string `xml:"retired_pages>multiple_single_bit_retirement>retired_count"`
	RetiredDBE     string `xml:"retired_pages>double_bit_retirement>retired_count"`
	RetiredPending string `xml:"retired_pages>pending_retirement"`
	RemapCorr      string `xml:"remapped_rows>remapped_row_corr"`
	RemapUnc       string `xml:"remapped_rows>remapped_row_unc"`
	RemapPending   string `xml:"remapped_rows>remapped_row_pending"`
	RemapFailure   string `xml:"remapped_rows>remapped_row_failure"`
	RecoveryAction string `xml:"gpu_recovery_action"`
}

// smiMIG is one <mig_device>.
type smiMIG struct {
	Index             string `xml:"index"`
	GPUInstanceID     string `xml:"gpu_instance_id"`
	ComputeInstanceID string `xml:"compute_instance_id"`
	UUID              string `xml:"uuid"`
	FBTotal           string `xml:"fb_memory_usage>total"`
}

// smiECC is <volatile> or <aggregate> under <ecc_errors>. Drivers before 440
// count single- and double-bit errors by location with a total each; later
// ones count SRAM and DRAM errors, and 570 onwards split uncorrectable SRAM
// errors into parity and SEC-DED.
type smiECC struct {
	SingleBitTotal          string `xml:"single_bit>total"`
	DoubleBitTotal          string `xml:"double_bit>total"`
	SRAMCorrectable         string `xml:"sram_correctable"`
	SRAMUncorrectable       string `xml:"sram_uncorrectable"`
	SRAMUncorrectableParity string `xml:"sram_uncorrectable_parity"`
	SRAMUncorrectableSECDED string `xml:"sram_uncorrectable_secded"`
	DRAMCorrectable         string `xml:"dram_correctable"`
	DRAMUncorrectable       string `xml:"dram_uncorrectable"`
}

// corrected and uncorrected sum what this driver reports.
func (e smiECC) corrected() int64 {
	return sum(e.SingleBitTotal, e.SRAMCorrectable, e.DRAMCorrectable)
}

func (e smiECC) uncorrected() int64 {
	return sum(e.DoubleBitTotal, e.SRAMUncorrectable, e.SRAMUncorrectableParity, e.SRAMUncorrectableSECDED, e.DRAMUncorrectable)
}

// decodeNvidiaSMI reads `nvidia-smi -q -x` output.
func decodeNvidiaSMI(b []byte) (*smiLog, error) {
	var l smiLog
	d := xml.NewDecoder(bytes.NewReader(b))
	// nvidia-smi writes ASCII; take any other declared charset as it is
	// rather than refusing the document.
	d.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil }
	if err := d.Decode(&l); err != nil {
		return nil, fmt.Errorf("error parsing nvidia-smi XML: %w", err)
	}
	return &l, nil
}

// ParseNvidiaSMI reads the output of `nvidia-smi -q -x`: the driver and CUDA
// versions and, per GPU in nvidia-smi's order, its model, UUID, PCI bus id,
// memory, serial, VBIOS, device node, MIG mode and MIG devices, and ECC
// counts. "N/A" and missing elements read as zero values. nvidia-smi's XML
// carries no NUMA node, so NumaNode is -1; Collect fills it from sysfs.
func ParseNvidiaSMI(xml []byte) (*agentv1.GPUs, error) {
	l, err := decodeNvidiaSMI(xml)
	if err != nil {
		return nil, err
	}
	g := &agentv1.GPUs{DriverVersion: text(l.DriverVersion), CudaVersion: text(l.CUDAVersion)}
	for i, s := range l.GPUs {
		d := &agentv1.GPU{
			Index:        int32(min(i, math.MaxInt32)),
			Uuid:         text(s.UUID),
			Name:         text(s.ProductName),
			PciBusId:     cmp.Or(text(s.PCIBusID), text(s.ID)),
			MemoryBytes:  mib(s.FBTotal),
			Serial:       text(s.Serial),
			VbiosVersion: text(s.VBIOS),
			MigEnabled:   enabled(s.MIGCurrent),
			MigPending:   enabled(s.MIGPending),
			NumaNode:     -1,
			EccErrors: &agentv1.ECCErrors{
				VolatileCorrected:    s.Volatile.corrected(),
				VolatileUncorrected:  s.Volatile.uncorrected(),
				AggregateCorrected:   s.Aggregate.corrected(),
				AggregateUncorrected: s.Aggregate.uncorrected(),
			},
		}
		if minor, ok := count(s.MinorNumber); ok {
			d.DevicePath = "/dev/nvidia" + strconv.FormatInt(minor, 10)
		}
		for _, m := range s.MIGDevices {
			d.MigDevices = append(d.MigDevices, &agentv1.MIGDevice{
				Index:             int32(num(m.Index)),
				GpuInstanceId:     int32(num(m.GPUInstanceID)),
				ComputeInstanceId: int32(num(m.ComputeInstanceID)),
				MemoryBytes:       mib(m.FBTotal),
				Uuid:              text(m.UUID),
			})
		}
		g.Devices = append(g.Devices, d)
	}
	return g, nil
}

// text is an element's text, with nvidia-smi's "N/A" (and the like) as "".
func text(s string) string {
	s = strings.ToValidUTF8(strings.TrimSpace(s), "\uFFFD")
	switch s {
	case "N/A", "None", "[N/A]", "Unknown Error", "[Unknown Error]", "Not Supported", "[Not Supported]":
		return ""
	}
	return s
}

// count reads a non-negative integer element; "N/A" and the like are not one.
func count(s string) (int64, bool) {
	n, err := strconv.ParseInt(text(s), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// num is count, with 0 for what is not a count, capped to fit an int32.
func num(s string) int64 {
	n, _ := count(s)
	return min(n, math.MaxInt32)
}

// sum adds the counts that are there.
func sum(ss ...string) int64 {
	var t int64
	for _, s := range ss {
		if n, ok := count(s); ok && t <= math.MaxInt64-n {
			t += n
		}
	}
	return t
}

// mib reads a memory size such as "81559 MiB" into bytes.
func mib(s string) int64 {
	f := strings.Fields(text(s))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	shift := 20 // nvidia-smi prints MiB
	if len(f) > 1 {
		switch strings.ToLower(f[1]) {
		case "kib", "kb":
			shift = 10
		case "gib", "gb":
			shift = 30
		case "b":
			shift = 0
		}
	}
	if n > math.MaxInt64>>shift {
		return 0
	}
	return n << shift
}

// enabled reads a mode element: "Enabled" or not.
func enabled(s string) bool { return strings.EqualFold(text(s), "Enabled") }

// errNoNvidiaSMI says the host has no nvidia-smi.
var errNoNvidiaSMI = errors.New("nvidia-smi not found")

// nvidiaSMIPath finds nvidia-smi: the configured path if it exists,
// otherwise PATH.
func nvidiaSMIPath(configured string) (string, error) {
	p := configured
	if p == "" {
		p = "nvidia-smi"
	}
	found, err := exec.LookPath(p)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNoNvidiaSMI, err)
	}
	return found, nil
}

// runNvidiaSMI runs `nvidia-smi -q -x`, bounded by nvidiaSMITimeout.
func runNvidiaSMI(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, nvidiaSMITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-q", "-x")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A child that keeps the pipes open must not hold us past the deadline.
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(stderr.String()+" "+stdout.String()), "\n")
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		if msg != "" {
			return nil, fmt.Errorf("error running %s -q -x: %w: %s", path, err, msg)
		}
		return nil, fmt.Errorf("error running %s -q -x: %w", path, err)
	}
	return stdout.Bytes(), nil
}

// gpus reads the GPUs for Collect: GPUs it cannot read leave the section
// empty, with a warning, so that the rest of the inventory still goes out.
func (h *host) gpus(ctx context.Context, configured string) *agentv1.GPUs {
	g, err := h.readGPUs(ctx, configured)
	if err != nil {
		h.log.Warn("inventory: GPUs unreadable", "err", err)
		return &agentv1.GPUs{}
	}
	return g
}

// readGPUs reads the GPUs with nvidia-smi. No nvidia-smi means no GPUs; one
// that fails, or prints what cannot be read, is an error.
func (h *host) readGPUs(ctx context.Context, configured string) (*agentv1.GPUs, error) {
	path, err := nvidiaSMIPath(configured)
	if err != nil {
		h.log.Debug("inventory: no GPUs", "err", err)
		return &agentv1.GPUs{}, nil
	}
	out, err := runNvidiaSMI(ctx, path)
	if err != nil {
		return nil, err
	}
	g, err := ParseNvidiaSMI(out)
	if err != nil {
		return nil, err
	}
	for _, d := range g.Devices {
		d.NumaNode = h.pciNUMANode(d.PciBusId)
	}
	return g, nil
}

// pciNUMANode reads the NUMA node of a PCI device from sysfs, given
// nvidia-smi's form of its address ("00000000:18:00.0", a 32-bit domain);
// -1 when unknown.
func (h *host) pciNUMANode(busID string) int32 {
	dom, rest, ok := strings.Cut(strings.ToLower(busID), ":")
	if !ok || strings.ContainsAny(rest, "/\x00") {
		return -1
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return -1
	}
	n, ok := h.readInt(fmt.Sprintf("/sys/bus/pci/devices/%04x:%s/numa_node", d, rest))
	if !ok || n < -1 || n > math.MaxInt32 {
		return -1
	}
	return int32(n)
}
