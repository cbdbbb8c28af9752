package inventory

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestHealthSummaryNvidiaSMI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fixture string
		want    []string // lines, in order
	}{{
		fixture: "a100-sxm4-80gb-x8-driver-535.129.03.xml",
		want: []string{
			"driver 535.129.03, CUDA 12.2, 8 GPUs",
			"GPU 0 GPU-1d9e4a8c-5b2f-3c71-9e0a-6f3b2c8d4e17 NVIDIA A100-SXM4-80GB: temp 31 C, ecc volatile 0/0 aggregate 0/0 (corrected/uncorrected), remapped rows 0/0 (corrected/uncorrected): ok",
			"GPU 1 ",
			"GPU 2 GPU-c24f6e0b-91d3-7a8e-4f25-b3d17c0a9e52 NVIDIA A100-SXM4-80GB: temp 30 C, ecc volatile 3/0 aggregate 17/0 (corrected/uncorrected), remapped rows 1/0 (corrected/uncorrected): ok",
			"GPU 3 ", "GPU 4 ",
			"GPU 5 GPU-0b6e3d91-f5c8-42a7-9b3e-8c1d5f2a6e09 NVIDIA A100-SXM4-80GB: temp 34 C, ecc volatile 0/1 aggregate 2/1 (corrected/uncorrected), remapped rows 0/1 (corrected/uncorrected): uncorrected ECC errors since driver load: 1; row remapping pending (reset the GPU)",
			"GPU 6 ", "GPU 7 ",
		},
	}, {
		fixture: "tesla-v100-sxm2-32gb-x2-driver-418.87.01.xml",
		want: []string{
			"driver 418.87.01, CUDA 10.1, 2 GPUs",
			"GPU 0 GPU-3f8a1c6e-92d4-b705-1e6c-4a9f0d2b8c57 Tesla V100-SXM2-32GB: temp 36 C, ecc volatile 4/1 aggregate 12/2 (corrected/uncorrected), retired pages 2/1 (single/double bit): uncorrected ECC errors since driver load: 1",
			"GPU 1 GPU-a41e7d09-6b3c-58f2-d07a-e2c5b9f3a186 Tesla V100-SXM2-32GB: temp 37 C, ecc volatile 0/0 aggregate 1/0 (corrected/uncorrected), retired pages 0/0 (single/double bit): page retirement pending (reset the GPU)",
		},
	}, {
		fixture: "no-gpu-driver-550.90.07.xml",
		want:    []string{"driver 550.90.07, CUDA 12.4, 0 GPUs"},
	}}
	for _, tt := range tests {
		got, err := HealthSummary(context.Background(), Options{NvidiaSMI: catFixture(t, tt.fixture)})
		if err != nil {
			t.Fatalf("%s: %v", tt.fixture, err)
		}
		assertLines(t, tt.fixture, got, tt.want)
	}
}

// assertLines checks each line of got starts with the wanted line.
func assertLines(t *testing.T, what, got string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != len(want) {
		t.Errorf("%s: %d lines, want %d:\n%s", what, len(lines), len(want), got)
		return
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("%s: line %d\n  %q\nwant it to start\n  %q", what, i, lines[i], want[i])
		}
	}
}

func TestHealthSummaryFakeHW(t *testing.T) {
	t.Parallel()
	hw, err := LoadFakeHW("testdata/fakehw/a100x2-mig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// FakeHW answers even where nvidia-smi is missing.
	got, err := HealthSummary(context.Background(), Options{FakeHW: hw, NvidiaSMI: filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatal(err)
	}
	assertLines(t, "fakehw", got, []string{
		"driver 535.129.03, CUDA 12.2, 2 GPUs (fakehw)",
		"GPU 0 GPU-5f0e1c2a-83b4-4d6e-9a7f-0b1c2d3e4f50 NVIDIA A100-SXM4-80GB: ok",
		"GPU 1 GPU-a9b8c7d6-e5f4-4321-8765-fedcba987654 NVIDIA A100-SXM4-80GB: xid 48: double bit ECC error",
	})
}

func TestHealthSummaryErrors(t *testing.T) {
	t.Parallel()
	_, err := HealthSummary(context.Background(), Options{NvidiaSMI: filepath.Join(t.TempDir(), "nvidia-smi")})
	if !errors.Is(err, errNoNvidiaSMI) || !strings.HasPrefix(err.Error(), "error reading GPU health: nvidia-smi not found") {
		t.Errorf("no nvidia-smi: %v", err)
	}
	_, err = HealthSummary(context.Background(), Options{NvidiaSMI: fakeNvidiaSMI(t,
		`echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2; exit 9`)})
	if err == nil || !strings.Contains(err.Error(), "exit status 9: NVIDIA-SMI has failed") {
		t.Errorf("failing nvidia-smi: %v", err)
	}
	_, err = HealthSummary(context.Background(), Options{NvidiaSMI: fakeNvidiaSMI(t, "echo 'not xml'")})
	if err == nil || !strings.Contains(err.Error(), "error parsing nvidia-smi XML") {
		t.Errorf("garbage from nvidia-smi: %v", err)
	}
}
