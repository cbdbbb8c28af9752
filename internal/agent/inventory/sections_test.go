package inventory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// fixtureInventory collects the fixture host with the A100 GPUs.
func fixtureInventory(t *testing.T) *agentv1.Inventory {
	t.Helper()
	inv, err := Collect(context.Background(), Options{
		Root: fixtureHost, NvidiaSMI: catFixture(t, "a100-sxm4-80gb-x8-driver-535.129.03.xml"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func hashes(secs []*agentv1.InventorySection) map[string][]byte {
	m := map[string][]byte{}
	for _, s := range secs {
		m[s.Name] = s.Hash
	}
	return m
}

func TestSectionsRoundTrip(t *testing.T) {
	t.Parallel()
	for name, inv := range map[string]*agentv1.Inventory{
		"fixture host": fixtureInventory(t),
		"fakehw":       mustCollectFake(t, GenerateFakeHW("s", 3, 8, "")),
		"empty":        {},
	} {
		secs := Sections(inv)
		var names []string
		for _, s := range secs {
			names = append(names, s.Name)
			if sum := sha256.Sum256(s.Content); !bytes.Equal(sum[:], s.Hash) {
				t.Errorf("%s: section %s: hash is not the content's SHA-256", name, s.Name)
			}
		}
		if strings.Join(names, ",") != "host,cpu,memory,disks,nics,gpus" {
			t.Errorf("%s: sections %v", name, names)
		}
		got, err := Merge(secs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		assertProto(t, name, got, inv)
	}
}

// TestSectionsInvalidUTF8: a string that is not UTF-8 (a disk model from
// sysfs, a GPU name) is repaired, not the cause of an empty section, and
// the caller's inventory is left as it was.
func TestSectionsInvalidUTF8(t *testing.T) {
	t.Parallel()
	inv := &agentv1.Inventory{
		Host:  &agentv1.Host{Hostname: "gpu-01"},
		Disks: []*agentv1.Disk{{Name: "sda", Model: "WD\xff\xfeRed"}},
		Gpus:  &agentv1.GPUs{Devices: []*agentv1.GPU{{Uuid: "GPU-1", Name: "NVIDIA \xc3"}}},
		Nics:  []*agentv1.NIC{{Name: "eth0", Addresses: []string{"10.0.0.1/24", "bad\x80"}}},
	}
	got, err := Merge(Sections(inv))
	if err != nil {
		t.Fatal(err)
	}
	if m := got.GetDisks()[0].GetModel(); m != "WD\uFFFDRed" {
		t.Errorf("disk model = %q, want %q", m, "WD\uFFFDRed")
	}
	if n := got.GetGpus().GetDevices()[0].GetName(); n != "NVIDIA \uFFFD" {
		t.Errorf("GPU name = %q", n)
	}
	if a := got.GetNics()[0].GetAddresses(); len(a) != 2 || a[1] != "bad\uFFFD" {
		t.Errorf("NIC addresses = %q", a)
	}
	if got.GetHost().GetHostname() != "gpu-01" {
		t.Errorf("host = %v", got.GetHost())
	}
	if inv.GetDisks()[0].GetModel() != "WD\xff\xfeRed" {
		t.Error("Sections changed its input")
	}
}

func mustCollectFake(t *testing.T, hw *FakeHW) *agentv1.Inventory {
	t.Helper()
	inv, err := Collect(context.Background(), Options{Root: fixtureHost, FakeHW: hw})
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestSectionsHashStability(t *testing.T) {
	t.Parallel()
	a, b := fixtureInventory(t), fixtureInventory(t)
	ha, hb := hashes(Sections(a)), hashes(Sections(b))
	for name := range ha {
		if !bytes.Equal(ha[name], hb[name]) {
			t.Errorf("section %s: two reads of the same host hash differently", name)
		}
	}

	// One GPU changes (an ECC error): only "gpus" changes.
	b.Gpus.Devices[3].EccErrors.VolatileCorrected++
	hb = hashes(Sections(b))
	for name := range ha {
		if changed := !bytes.Equal(ha[name], hb[name]); changed != (name == "gpus") {
			t.Errorf("section %s: changed %v after a GPU's ECC count changed", name, changed)
		}
	}

	// So for a fakehw node whose GPU model changes.
	hw := GenerateFakeHW("s", 1, 8, "")
	before := hashes(Sections(mustCollectFake(t, hw)))
	hw.GPUs[5].Model = "NVIDIA H200"
	after := hashes(Sections(mustCollectFake(t, hw)))
	for name := range before {
		if changed := !bytes.Equal(before[name], after[name]); changed != (name == "gpus") {
			t.Errorf("fakehw section %s: changed %v after a GPU's model changed", name, changed)
		}
	}
}

func TestMergeRefuses(t *testing.T) {
	t.Parallel()
	inv := fixtureInventory(t)
	secs := func() []*agentv1.InventorySection { return Sections(inv) }
	section := func(name string, content []byte) *agentv1.InventorySection {
		sum := sha256.Sum256(content)
		return &agentv1.InventorySection{Name: name, Hash: sum[:], Content: content}
	}
	cpuAndMemory, err := proto.Marshal(&agentv1.Inventory{Cpu: inv.Cpu, Memory: inv.Memory})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		input []*agentv1.InventorySection
		want  string
	}{
		{"unknown name", []*agentv1.InventorySection{section("bios", nil)}, `section "bios": unknown section`},
		{"repeated", append(secs(), secs()[1]), `section "cpu": section given twice`},
		{"hash mismatch", func() []*agentv1.InventorySection {
			s := secs()
			s[5].Content = s[1].Content
			return s
		}(), `section "gpus": content does not match its hash`},
		{"unchanged, without content", func() []*agentv1.InventorySection {
			s := secs()
			s[0].Content = nil
			return s
		}(), `section "host": no content`},
		{"fields of another section", []*agentv1.InventorySection{section("cpu", cpuAndMemory)}, "holds fields of other sections"},
		{"not protobuf", []*agentv1.InventorySection{section("nics", []byte{0xff, 0xff})}, "error decoding content"},
	}
	for _, tt := range tests {
		got, err := Merge(tt.input)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Merge = %v, %v; want an error with %q", tt.name, got, err, tt.want)
		}
	}
}

// TestMergeEmptySections: a section with nothing in it has empty content and
// still merges; sections left out stay unset.
func TestMergeEmptySections(t *testing.T) {
	t.Parallel()
	secs := Sections(&agentv1.Inventory{Cpu: &agentv1.CPU{Threads: 4}})
	var keep []*agentv1.InventorySection
	for _, s := range secs {
		if s.Name == "cpu" || s.Name == "disks" {
			keep = append(keep, s)
		}
	}
	got, err := Merge(keep)
	if err != nil {
		t.Fatal(err)
	}
	assertProto(t, "merged", got, &agentv1.Inventory{Cpu: &agentv1.CPU{Threads: 4}})
}
