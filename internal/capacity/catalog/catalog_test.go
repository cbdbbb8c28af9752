package catalog

import (
	"regexp"
	"strings"
	"testing"
)

func TestLookupKnown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string // as nvidia-smi (or a careless human) spells it
		key  string
	}{
		{"NVIDIA H200", "h200-sxm"},
		{"NVIDIA H200 141GB HBM3e", "h200-sxm"},
		{"NVIDIA H200 NVL", "h200-nvl"},
		{"NVIDIA H100 80GB HBM3", "h100-sxm"},
		{"NVIDIA H100 SXM5 80GB", "h100-sxm"},
		{"nvidia  h100   80 gb  hbm3", "h100-sxm"},
		{"NVIDIA H100 PCIe", "h100-pcie"},
		{"NVIDIA H100-PCIE", "h100-pcie"},
		{"NVIDIA H100 NVL", "h100-nvl"},
		{"NVIDIA H100 94GB HBM3", "h100-nvl"},
		{"NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"},
		{"NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"},
		{"NVIDIA A100-SXM-80GB", "a100-sxm4-80gb"},
		{"a100 sxm4 80 GB", "a100-sxm4-80gb"},
		{"NVIDIA A100 80GB PCIe", "a100-pcie-80gb"},
		{"NVIDIA A100-PCIE-80GB", "a100-pcie-80gb"},
		{"NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"},
		{"NVIDIA A100 PCIe 40GB", "a100-pcie-40gb"},
		{"NVIDIA B200", "b200"},
		{"NVIDIA L40S", "l40s"},
		{"nvidia-l40s", "l40s"},
		{"NVIDIA L40", "l40"},
		{"NVIDIA L4", "l4"},
		{"NVIDIA A10G", "a10g"},
		{"NVIDIA A10", "a10"},
		{"Tesla T4", "t4"},
		{"NVIDIA GeForce RTX 4090", "rtx4090"},
		{"GeForce RTX-4090", "rtx4090"},
		{"NVIDIA GeForce RTX 5090", "rtx5090"},
		{"NVIDIA RTX 6000 Ada Generation", "rtx6000-ada"},
		{"NVIDIA RTX A6000", "rtx-a6000"},
		{"Tesla V100-SXM2-16GB", "v100-sxm2-16gb"},
		{"Tesla V100-SXM2-32GB", "v100-sxm2-32gb"},
		{"Tesla V100-PCIE-16GB", "v100-pcie-16gb"},
		{"Tesla V100-PCIE-32GB", "v100-pcie-32gb"},
		{"Tesla V100S-PCIE-32GB", "v100s-pcie-32gb"},
		{"  NVIDIA   H100   PCIe  ", "h100-pcie"},
		{"NVIDIA_H100_PCIE", "h100-pcie"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := Lookup(tt.name)
			if m.Key != tt.key || !m.Known {
				t.Fatalf("Lookup(%q) = %+v, want key %q, known", tt.name, m, tt.key)
			}
			want, ok := ByKey(tt.key)
			if !ok || m != want {
				t.Fatalf("Lookup(%q) = %+v, ByKey(%q) = %+v, %v", tt.name, m, tt.key, want, ok)
			}
		})
	}
}

func TestLookupUnknown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, display string
	}{
		{"Acme Turbo X1", "acme-turbo-x1", "Acme Turbo X1"},
		{"NVIDIA H800", "h800", "NVIDIA H800"},
		{"NVIDIA GH200 480GB", "gh200-480gb", "NVIDIA GH200 480GB"},
		{"Quadro RTX 6000", "quadro-rtx-6000", "Quadro RTX 6000"},
		// A bare A100 does not say which of four parts it is.
		{"NVIDIA A100", "a100", "NVIDIA A100"},
		{"  --Weird__Name!!  v2 ", "weird-name-v2", "--Weird__Name!! v2"},
		{"Ünïcödé GPU", "n-c-d-gpu", "Ünïcödé GPU"},
		{"NVIDIA", "nvidia", "NVIDIA"},
		{"", "unknown", "unknown"},
		{"   ", "unknown", "unknown"},
		{"---", "unknown", "---"},
		{strings.Repeat("ab-", 40), strings.TrimRight(strings.Repeat("ab-", 21), "-"), strings.Repeat("ab-", 40)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := Lookup(tt.name)
			want := Model{Key: tt.key, Name: tt.display, Meter: "gpu." + tt.key + ".hours"}
			if m != want {
				t.Fatalf("Lookup(%q) = %+v, want %+v", tt.name, m, want)
			}
		})
	}
}

// TestModels checks the catalog itself: every entry well formed, keys unique,
// meters named for a family, and each entry reachable by its own display
// name, so that no entry is shadowed by an earlier, more general one.
func TestModels(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, m := range Models() {
		t.Run(m.Key, func(t *testing.T) {
			t.Parallel()
			if !keyRE.MatchString(m.Key) || !meterRE.MatchString(m.Meter) || m.Name == "" || m.MemoryGiB <= 0 || !m.Known {
				t.Fatalf("malformed entry %+v", m)
			}
			if got := Lookup(m.Name); got != m {
				t.Fatalf("Lookup(%q) = %+v, want the entry %+v", m.Name, got, m)
			}
		})
		if seen[m.Key] {
			t.Errorf("duplicate key %q", m.Key)
		}
		seen[m.Key] = true
	}
	for _, key := range []string{"h200-sxm", "h100-sxm", "h100-pcie", "a100-sxm4-40gb", "a100-pcie-80gb", "l40s", "l4", "rtx4090", "rtx5090"} {
		if !seen[key] {
			t.Errorf("catalog lacks %q", key)
		}
	}
	if _, ok := ByKey("acme-turbo-x1"); ok {
		t.Error("ByKey found a model that is not in the catalog")
	}
}

func TestMetersGroupFamilies(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, meter string }{
		{"NVIDIA H100 80GB HBM3", "gpu.h100.hours"},
		{"NVIDIA H100 PCIe", "gpu.h100.hours"},
		{"NVIDIA H100 NVL", "gpu.h100.hours"},
		{"NVIDIA H200", "gpu.h200.hours"},
		{"NVIDIA H200 NVL", "gpu.h200.hours"},
		{"NVIDIA A100-SXM4-40GB", "gpu.a100.hours"},
		{"NVIDIA A100-SXM4-80GB", "gpu.a100.hours"},
		{"NVIDIA A100 80GB PCIe", "gpu.a100.hours"},
		{"NVIDIA A100-PCIE-40GB", "gpu.a100.hours"},
		{"NVIDIA L40S", "gpu.l40s.hours"},
		{"NVIDIA L4", "gpu.l4.hours"},
		{"NVIDIA GeForce RTX 4090", "gpu.rtx4090.hours"},
		{"NVIDIA GeForce RTX 5090", "gpu.rtx5090.hours"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Lookup(tt.name).Meter; got != tt.meter {
				t.Fatalf("Lookup(%q).Meter = %q, want %q", tt.name, got, tt.meter)
			}
		})
	}
}

var (
	keyRE   = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	meterRE = regexp.MustCompile(`^gpu\.[a-z0-9]+(-[a-z0-9]+)*\.hours$`)
)

func FuzzLookup(f *testing.F) {
	for _, m := range Models() {
		f.Add(m.Name)
	}
	for _, s := range []string{"", " ", "NVIDIA", "nvidia-", "Acme Turbo X1", "80 gb", "gb", "\xff\xfe", "Ünïcödé"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		m := Lookup(name)
		if strings.TrimSpace(name) == "" && m.Key != "unknown" {
			t.Fatalf("Lookup(%q).Key = %q, want unknown", name, m.Key)
		}
		if !keyRE.MatchString(m.Key) || len(m.Key) > maxKeyLen {
			t.Fatalf("Lookup(%q).Key = %q, malformed", name, m.Key)
		}
		if m.Meter != "gpu."+m.Key+".hours" && !m.Known {
			t.Fatalf("Lookup(%q).Meter = %q for unknown key %q", name, m.Meter, m.Key)
		}
		if !meterRE.MatchString(m.Meter) {
			t.Fatalf("Lookup(%q).Meter = %q, malformed", name, m.Meter)
		}
		if m.Name == "" {
			t.Fatalf("Lookup(%q).Name is empty", name)
		}
	})
}
