package catalog

// table is the catalog. Each entry lists the word sets (see tokens) that
// name it; the first entry that matches wins, so variants come before the
// bare family name they share words with. Names are as nvidia-smi prints
// them; the spellings in the comments are the ones seen in the field.
var table = []entry{
	// "NVIDIA H200 NVL" before the bare "NVIDIA H200" (the SXM part).
	{Model{Key: "h200-nvl", Name: "NVIDIA H200 NVL", Meter: "gpu.h200.hours", MemoryGiB: 141, Known: true},
		[][]string{{"h200", "nvl"}}},
	// "NVIDIA H200", "NVIDIA H200 141GB HBM3e".
	{Model{Key: "h200-sxm", Name: "NVIDIA H200 SXM", Meter: "gpu.h200.hours", MemoryGiB: 141, Known: true},
		[][]string{{"h200"}}},
	// "NVIDIA H100 NVL"; the 94 GB part.
	{Model{Key: "h100-nvl", Name: "NVIDIA H100 NVL", Meter: "gpu.h100.hours", MemoryGiB: 94, Known: true},
		[][]string{{"h100", "nvl"}, {"h100", "94gb"}}},
	// "NVIDIA H100 PCIe".
	{Model{Key: "h100-pcie", Name: "NVIDIA H100 PCIe", Meter: "gpu.h100.hours", MemoryGiB: 80, Known: true},
		[][]string{{"h100", "pcie"}}},
	// "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB": what is left of H100.
	{Model{Key: "h100-sxm", Name: "NVIDIA H100 SXM", Meter: "gpu.h100.hours", MemoryGiB: 80, Known: true},
		[][]string{{"h100"}}},
	// "NVIDIA A100-SXM4-80GB"; HGX boards have also said "A100-SXM-80GB".
	{Model{Key: "a100-sxm4-80gb", Name: "NVIDIA A100 SXM4 80GB", Meter: "gpu.a100.hours", MemoryGiB: 80, Known: true},
		[][]string{{"a100", "sxm4", "80gb"}, {"a100", "sxm", "80gb"}}},
	// "NVIDIA A100-SXM4-40GB"; an SXM4 name without a size is the 40 GB part,
	// the only one there was before the 80 GB one.
	{Model{Key: "a100-sxm4-40gb", Name: "NVIDIA A100 SXM4 40GB", Meter: "gpu.a100.hours", MemoryGiB: 40, Known: true},
		[][]string{{"a100", "sxm4"}, {"a100", "sxm"}}},
	// "NVIDIA A100 80GB PCIe".
	{Model{Key: "a100-pcie-80gb", Name: "NVIDIA A100 PCIe 80GB", Meter: "gpu.a100.hours", MemoryGiB: 80, Known: true},
		[][]string{{"a100", "pcie", "80gb"}}},
	// "NVIDIA A100-PCIE-40GB"; likewise the first PCIe part.
	{Model{Key: "a100-pcie-40gb", Name: "NVIDIA A100 PCIe 40GB", Meter: "gpu.a100.hours", MemoryGiB: 40, Known: true},
		[][]string{{"a100", "pcie"}}},
	// "NVIDIA B200".
	{Model{Key: "b200", Name: "NVIDIA B200", Meter: "gpu.b200.hours", MemoryGiB: 180, Known: true},
		[][]string{{"b200"}}},
	// "NVIDIA L40S" and "NVIDIA L40" are different words, so order does not
	// matter between them.
	{Model{Key: "l40s", Name: "NVIDIA L40S", Meter: "gpu.l40s.hours", MemoryGiB: 48, Known: true},
		[][]string{{"l40s"}}},
	{Model{Key: "l40", Name: "NVIDIA L40", Meter: "gpu.l40.hours", MemoryGiB: 48, Known: true},
		[][]string{{"l40"}}},
	{Model{Key: "l4", Name: "NVIDIA L4", Meter: "gpu.l4.hours", MemoryGiB: 24, Known: true},
		[][]string{{"l4"}}},
	// "NVIDIA A10G" (AWS) and "NVIDIA A10".
	{Model{Key: "a10g", Name: "NVIDIA A10G", Meter: "gpu.a10g.hours", MemoryGiB: 24, Known: true},
		[][]string{{"a10g"}}},
	{Model{Key: "a10", Name: "NVIDIA A10", Meter: "gpu.a10.hours", MemoryGiB: 24, Known: true},
		[][]string{{"a10"}}},
	// "Tesla T4".
	{Model{Key: "t4", Name: "NVIDIA T4", Meter: "gpu.t4.hours", MemoryGiB: 16, Known: true},
		[][]string{{"t4"}}},
	// "NVIDIA GeForce RTX 4090".
	{Model{Key: "rtx4090", Name: "NVIDIA GeForce RTX 4090", Meter: "gpu.rtx4090.hours", MemoryGiB: 24, Known: true},
		[][]string{{"rtx", "4090"}, {"rtx4090"}}},
	// "NVIDIA GeForce RTX 5090".
	{Model{Key: "rtx5090", Name: "NVIDIA GeForce RTX 5090", Meter: "gpu.rtx5090.hours", MemoryGiB: 32, Known: true},
		[][]string{{"rtx", "5090"}, {"rtx5090"}}},
	// "NVIDIA RTX 6000 Ada Generation"; the Turing "Quadro RTX 6000" lacks
	// "ada" and stays unknown.
	{Model{Key: "rtx6000-ada", Name: "NVIDIA RTX 6000 Ada", Meter: "gpu.rtx6000ada.hours", MemoryGiB: 48, Known: true},
		[][]string{{"rtx", "6000", "ada"}}},
	// "NVIDIA RTX A6000".
	{Model{Key: "rtx-a6000", Name: "NVIDIA RTX A6000", Meter: "gpu.rtxa6000.hours", MemoryGiB: 48, Known: true},
		[][]string{{"rtx", "a6000"}}},
	// "Tesla V100-SXM2-32GB", "Tesla V100-SXM2-16GB", "Tesla V100-PCIE-32GB",
	// "Tesla V100-PCIE-16GB", "Tesla V100S-PCIE-32GB".
	{Model{Key: "v100-sxm2-32gb", Name: "NVIDIA V100 SXM2 32GB", Meter: "gpu.v100.hours", MemoryGiB: 32, Known: true},
		[][]string{{"v100", "sxm2", "32gb"}}},
	{Model{Key: "v100-sxm2-16gb", Name: "NVIDIA V100 SXM2 16GB", Meter: "gpu.v100.hours", MemoryGiB: 16, Known: true},
		[][]string{{"v100", "sxm2"}}},
	{Model{Key: "v100-pcie-32gb", Name: "NVIDIA V100 PCIe 32GB", Meter: "gpu.v100.hours", MemoryGiB: 32, Known: true},
		[][]string{{"v100", "pcie", "32gb"}}},
	{Model{Key: "v100-pcie-16gb", Name: "NVIDIA V100 PCIe 16GB", Meter: "gpu.v100.hours", MemoryGiB: 16, Known: true},
		[][]string{{"v100", "pcie"}}},
	{Model{Key: "v100s-pcie-32gb", Name: "NVIDIA V100S PCIe 32GB", Meter: "gpu.v100.hours", MemoryGiB: 32, Known: true},
		[][]string{{"v100s"}}},
}
