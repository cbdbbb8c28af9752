package inventory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

const mib1 = 1 << 20

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "nvidia-smi", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ecc(vc, vu, ac, au int64) *agentv1.ECCErrors {
	return &agentv1.ECCErrors{VolatileCorrected: vc, VolatileUncorrected: vu, AggregateCorrected: ac, AggregateUncorrected: au}
}

func assertProto(t *testing.T, what string, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("%s:\ngot:  %s\nwant: %s", what, prototext.Format(got), prototext.Format(want))
	}
}

func TestParseNvidiaSMIA100(t *testing.T) {
	t.Parallel()
	g, err := ParseNvidiaSMI(readFixture(t, "a100-sxm4-80gb-x8-driver-535.129.03.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if g.DriverVersion != "535.129.03" || g.CudaVersion != "12.2" || len(g.Devices) != 8 {
		t.Fatalf("driver %q cuda %q devices %d, want 535.129.03 12.2 8", g.DriverVersion, g.CudaVersion, len(g.Devices))
	}
	assertProto(t, "GPU 0", g.Devices[0], &agentv1.GPU{
		Index:        0,
		Uuid:         "GPU-1d9e4a8c-5b2f-3c71-9e0a-6f3b2c8d4e17",
		Name:         "NVIDIA A100-SXM4-80GB",
		PciBusId:     "00000000:07:00.0",
		MemoryBytes:  81920 * mib1,
		Serial:       "1324021007841",
		VbiosVersion: "92.00.45.00.06",
		EccErrors:    ecc(0, 0, 0, 0),
		NumaNode:     -1,
		DevicePath:   "/dev/nvidia2", // the minor number, not the index
	})
	wantBus := []string{"07", "0F", "47", "4E", "87", "90", "B7", "BD"}
	wantMinor := []string{"2", "3", "0", "1", "6", "7", "4", "5"}
	for i, d := range g.Devices {
		if d.Index != int32(i) || d.PciBusId != "00000000:"+wantBus[i]+":00.0" || d.DevicePath != "/dev/nvidia"+wantMinor[i] {
			t.Errorf("GPU %d: index %d bus %s path %s", i, d.Index, d.PciBusId, d.DevicePath)
		}
		if d.MigEnabled || d.MigPending || len(d.MigDevices) != 0 {
			t.Errorf("GPU %d: MIG %v/%v with %d devices, want off", i, d.MigEnabled, d.MigPending, len(d.MigDevices))
		}
	}
	assertProto(t, "GPU 2 ECC", g.Devices[2].EccErrors, ecc(3, 0, 17, 0))
	assertProto(t, "GPU 5 ECC", g.Devices[5].EccErrors, ecc(0, 1, 2, 1))
}

func TestParseNvidiaSMIH100MIG(t *testing.T) {
	t.Parallel()
	g, err := ParseNvidiaSMI(readFixture(t, "h100-80gb-hbm3-x4-mig-driver-575.57.08.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if g.DriverVersion != "575.57.08" || g.CudaVersion != "12.9" || len(g.Devices) != 4 {
		t.Fatalf("driver %q cuda %q devices %d, want 575.57.08 12.9 4", g.DriverVersion, g.CudaVersion, len(g.Devices))
	}
	for _, d := range g.Devices {
		if d.Name != "NVIDIA H100 80GB HBM3" || d.MemoryBytes != 81559*mib1 {
			t.Errorf("GPU %d: %q %d bytes", d.Index, d.Name, d.MemoryBytes)
		}
	}
	mig := func(i, gi int32, mem int64) *agentv1.MIGDevice {
		return &agentv1.MIGDevice{Index: i, GpuInstanceId: gi, MemoryBytes: mem * mib1}
	}
	tests := []struct {
		gpu              int
		enabled, pending bool
		devices          []*agentv1.MIGDevice
	}{
		{0, true, true, []*agentv1.MIGDevice{mig(0, 2, 40448), mig(1, 3, 20096), mig(2, 9, 9856), mig(3, 10, 9856)}},
		{1, true, true, []*agentv1.MIGDevice{mig(0, 0, 80384)}},
		{2, false, true, nil},
		{3, false, false, nil},
	}
	for _, tt := range tests {
		d := g.Devices[tt.gpu]
		if d.MigEnabled != tt.enabled || d.MigPending != tt.pending {
			t.Errorf("GPU %d: MIG %v pending %v, want %v %v", tt.gpu, d.MigEnabled, d.MigPending, tt.enabled, tt.pending)
		}
		assertProto(t, "MIG devices", &agentv1.GPU{MigDevices: d.MigDevices}, &agentv1.GPU{MigDevices: tt.devices})
	}
	// The 570+ schema splits uncorrectable SRAM errors; GPU 3 has some of
	// the others.
	assertProto(t, "GPU 3 ECC", g.Devices[3].EccErrors, ecc(2, 0, 6, 0))
}

func TestParseNvidiaSMIOldECCSchema(t *testing.T) {
	t.Parallel()
	g, err := ParseNvidiaSMI(readFixture(t, "tesla-v100-sxm2-32gb-x2-driver-418.87.01.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if g.DriverVersion != "418.87.01" || g.CudaVersion != "10.1" || len(g.Devices) != 2 {
		t.Fatalf("driver %q cuda %q devices %d", g.DriverVersion, g.CudaVersion, len(g.Devices))
	}
	d := g.Devices[0]
	if d.Name != "Tesla V100-SXM2-32GB" || d.MemoryBytes != 32480*mib1 || d.MigEnabled || d.PciBusId != "00000000:06:00.0" {
		t.Errorf("GPU 0: %s", prototext.Format(d))
	}
	// single_bit/double_bit totals, not their per-location parts.
	assertProto(t, "GPU 0 ECC", d.EccErrors, ecc(4, 1, 12, 2))
	assertProto(t, "GPU 1 ECC", g.Devices[1].EccErrors, ecc(0, 0, 1, 0))
}

func TestParseNvidiaSMINoGPU(t *testing.T) {
	t.Parallel()
	g, err := ParseNvidiaSMI(readFixture(t, "no-gpu-driver-550.90.07.xml"))
	if err != nil {
		t.Fatal(err)
	}
	assertProto(t, "GPUs", g, &agentv1.GPUs{DriverVersion: "550.90.07", CudaVersion: "12.4"})
}

func TestParseNvidiaSMIEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		xml  string
		want *agentv1.GPUs
	}{{
		name: "N/A and missing elements are zero values",
		xml: `<nvidia_smi_log><driver_version>N/A</driver_version><gpu id="00000000:01:00.0">
			<uuid>GPU-x</uuid><serial>N/A</serial><minor_number>N/A</minor_number>
			<fb_memory_usage><total>N/A</total></fb_memory_usage>
			<mig_mode><current_mig>N/A</current_mig></mig_mode></gpu></nvidia_smi_log>`,
		want: &agentv1.GPUs{Devices: []*agentv1.GPU{{
			Uuid: "GPU-x", PciBusId: "00000000:01:00.0", EccErrors: ecc(0, 0, 0, 0), NumaNode: -1,
		}}},
	}, {
		name: "MIG device UUIDs when the driver prints them",
		xml: `<nvidia_smi_log><gpu><mig_mode><current_mig>Enabled</current_mig><pending_mig>Disabled</pending_mig></mig_mode>
			<mig_devices><mig_device><index>0</index><gpu_instance_id>7</gpu_instance_id><compute_instance_id>1</compute_instance_id>
			<uuid>MIG-0b1c2d3e-4f50-5162-7384-95a6b7c8d9e0</uuid><fb_memory_usage><total>4864 MiB</total></fb_memory_usage>
			</mig_device></mig_devices></gpu></nvidia_smi_log>`,
		want: &agentv1.GPUs{Devices: []*agentv1.GPU{{
			MigEnabled: true, EccErrors: ecc(0, 0, 0, 0), NumaNode: -1,
			MigDevices: []*agentv1.MIGDevice{{
				GpuInstanceId: 7, ComputeInstanceId: 1, MemoryBytes: 4864 * mib1,
				Uuid: "MIG-0b1c2d3e-4f50-5162-7384-95a6b7c8d9e0",
			}},
		}}},
	}, {
		name: "negative, huge and malformed numbers are zero",
		xml: `<nvidia_smi_log><gpu><minor_number>-3</minor_number>
			<fb_memory_usage><total>99999999999999999999 MiB</total></fb_memory_usage>
			<ecc_errors><volatile><sram_correctable>-1</sram_correctable><dram_correctable>9223372036854775807</dram_correctable>
			<sram_uncorrectable>x</sram_uncorrectable></volatile></ecc_errors></gpu></nvidia_smi_log>`,
		want: &agentv1.GPUs{Devices: []*agentv1.GPU{{
			EccErrors: ecc(9223372036854775807, 0, 0, 0), NumaNode: -1,
		}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseNvidiaSMI([]byte(tt.xml))
			if err != nil {
				t.Fatal(err)
			}
			assertProto(t, "GPUs", got, tt.want)
		})
	}
}

func TestParseNvidiaSMIRefuses(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"",
		"No devices were found",
		"<other_log></other_log>",
		"<nvidia_smi_log><gpu>",
		`<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><nvidia_smi_log><driver_version>&e;</driver_version></nvidia_smi_log>`,
	} {
		if g, err := ParseNvidiaSMI([]byte(in)); err == nil {
			t.Errorf("ParseNvidiaSMI(%q) = %v, want an error", in, g)
		} else if !strings.HasPrefix(err.Error(), "error parsing nvidia-smi XML: ") {
			t.Errorf("ParseNvidiaSMI(%q): error %q does not say what failed", in, err)
		}
	}
}

func FuzzParseNvidiaSMI(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "nvidia-smi"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		f.Add(readFixture(f, e.Name()))
	}
	f.Add([]byte(`<nvidia_smi_log><gpu><mig_devices><mig_device><index>1</index></mig_device></mig_devices></gpu></nvidia_smi_log>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseNvidiaSMI(b)
		if err != nil {
			return
		}
		// Whatever parses must go out as a section and come back.
		if _, err := proto.Marshal(g); err != nil {
			t.Fatalf("parsed GPUs do not marshal: %v", err)
		}
		l, err := decodeNvidiaSMI(b)
		if err != nil {
			t.Fatal(err)
		}
		if s := l.healthSummary(); !strings.HasPrefix(s, "driver ") {
			t.Fatalf("health summary %q has no header", s)
		}
	})
}
