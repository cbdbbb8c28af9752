//go:build unix

package agent

import (
	"strings"
	"testing"
)

// A fleet the process could not hold open is refused at the start, saying
// why, rather than failing agent by agent later.
func TestSimRefusesTooManyAgents(t *testing.T) {
	t.Parallel()
	err := RunSim(t.Context(), SimConfig{Nodes: 1 << 30, DataDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "open files") {
		t.Errorf("RunSim(2^30 agents) = %v, want a refusal naming the open-files limit", err)
	}
}
