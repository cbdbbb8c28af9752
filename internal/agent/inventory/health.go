package inventory

import (
	"context"
	"fmt"
	"strings"
)

// HealthSummary is the diag.nvml command: a short text report with a header
// line (driver, CUDA, GPU count) and one line per GPU: index, UUID, name,
// temperature, ECC counts, retired pages and remapped rows where the GPU
// reports them, and a verdict, "ok" or the problems found. With FakeHW it
// reports the description's gpuHealth. On a real host it runs
// `nvidia-smi -q -x`, and a host without nvidia-smi is an error.
func HealthSummary(ctx context.Context, o Options) (string, error) {
	if o.FakeHW != nil {
		return o.FakeHW.healthSummary(), nil
	}
	path, err := nvidiaSMIPath(o.NvidiaSMI)
	if err != nil {
		return "", fmt.Errorf("error reading GPU health: %w", err)
	}
	out, err := runNvidiaSMI(ctx, path)
	if err != nil {
		return "", fmt.Errorf("error reading GPU health: %w", err)
	}
	l, err := decodeNvidiaSMI(out)
	if err != nil {
		return "", fmt.Errorf("error reading GPU health: %w", err)
	}
	return l.healthSummary(), nil
}

// header is the summary's first line.
func header(driver, cuda string, n int, fake bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "driver %s, CUDA %s, %d GPU", orNA(driver), orNA(cuda), n)
	if n != 1 {
		b.WriteString("s")
	}
	if fake {
		b.WriteString(" (fakehw)")
	}
	b.WriteString("\n")
	return b.String()
}

// orNA shows an unknown value.
func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

func (hw *FakeHW) healthSummary() string {
	var b strings.Builder
	b.WriteString(header(hw.DriverVersion, hw.CUDAVersion, len(hw.GPUs), true))
	for i, g := range hw.GPUs {
		verdict := "ok"
		for uuid, h := range hw.GPUHealth {
			// UUIDs are hexadecimal: any case names the same GPU.
			if h = strings.TrimSpace(h); h != "" && strings.EqualFold(uuid, g.UUID) {
				verdict = strings.Join(strings.Fields(h), " ")
			}
		}
		fmt.Fprintf(&b, "GPU %d %s %s: %s\n", i, g.UUID, g.Model, verdict)
	}
	return b.String()
}

func (l *smiLog) healthSummary() string {
	var b strings.Builder
	b.WriteString(header(text(l.DriverVersion), text(l.CUDAVersion), len(l.GPUs), false))
	for i, g := range l.GPUs {
		var facts, problems []string
		if t := text(g.Temp); t != "" {
			facts = append(facts, "temp "+t)
		}
		facts = append(facts, fmt.Sprintf("ecc volatile %d/%d aggregate %d/%d (corrected/uncorrected)",
			g.Volatile.corrected(), g.Volatile.uncorrected(), g.Aggregate.corrected(), g.Aggregate.uncorrected()))
		if sbe, ok := count(g.RetiredSBE); ok {
			dbe, _ := count(g.RetiredDBE)
			facts = append(facts, fmt.Sprintf("retired pages %d/%d (single/double bit)", sbe, dbe))
		}
		if corr, ok := count(g.RemapCorr); ok {
			unc, _ := count(g.RemapUnc)
			facts = append(facts, fmt.Sprintf("remapped rows %d/%d (corrected/uncorrected)", corr, unc))
		}
		if n := g.Volatile.uncorrected(); n > 0 {
			problems = append(problems, fmt.Sprintf("uncorrected ECC errors since driver load: %d", n))
		}
		if yes(g.RetiredPending) {
			problems = append(problems, "page retirement pending (reset the GPU)")
		}
		if yes(g.RemapPending) {
			problems = append(problems, "row remapping pending (reset the GPU)")
		}
		if yes(g.RemapFailure) {
			problems = append(problems, "row remapping failed")
		}
		if a := text(g.RecoveryAction); a != "" {
			problems = append(problems, "recovery action "+a)
		}
		verdict := "ok"
		if len(problems) > 0 {
			verdict = strings.Join(problems, "; ")
		}
		fmt.Fprintf(&b, "GPU %d %s %s: %s: %s\n", i, orNA(text(g.UUID)), orNA(text(g.ProductName)),
			strings.Join(facts, ", "), verdict)
	}
	return b.String()
}

// yes reads a Yes/No element.
func yes(s string) bool { return strings.EqualFold(text(s), "Yes") }
