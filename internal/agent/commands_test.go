package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/inventory"
)

// testNode is a Node that can run commands without a session.
func testNode(t *testing.T, hw *inventory.FakeHW) *Node {
	t.Helper()
	n := NewNode(Config{DataDir: t.TempDir(), FakeHW: hw})
	n.id.Store(&identity{config: nodeConfig{NodeID: "n-1"}})
	n.log = n.log.With("node", "n-1")
	return n
}

func runKind(t *testing.T, n *Node, kind string, args map[string]string) (*agentv1.CommandResult, func()) {
	t.Helper()
	return n.run(context.Background(), &agentv1.Command{Id: "c", Kind: kind, Args: args})
}

func TestRunCommands(t *testing.T) {
	t.Parallel()
	allow := inventory.GenerateFakeHW("t", 0, 2, "")
	allow.AllowReboot = true
	deny := inventory.GenerateFakeHW("t", 0, 2, "")
	deny.AllowReboot = false
	tests := map[string]struct {
		hw        *inventory.FakeHW
		kind      string
		args      map[string]string
		status    agentv1.CommandStatus
		contains  string // in the output or the error
		simulated bool   // a simulated reboot follows
	}{
		"unknown kind":            {deny, "rm.rf", nil, agentv1.CommandStatus_COMMAND_STATUS_FAILED, "unknown command kind", false},
		"refresh":                 {deny, kindInventoryRefresh, nil, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "2 GPUs", false},
		"diag":                    {deny, kindDiagNVML, nil, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "", false},
		"fake reboot allowed":     {allow, kindNodeReboot, nil, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "simulated reboot", true},
		"fake reboot denied":      {deny, kindNodeReboot, nil, agentv1.CommandStatus_COMMAND_STATUS_FAILED, "does not allow reboots", false},
		"real reboot unconfirmed": {nil, kindNodeReboot, nil, agentv1.CommandStatus_COMMAND_STATUS_FAILED, "confirm=yes", false},
		"real reboot confirmed":   {nil, kindNodeReboot, map[string]string{"confirm": "yes"}, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "reboot requested", false},
		"logs":                    {deny, kindLogsCollect, map[string]string{"lines": "2"}, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "line 9", false},
		"logs too many":           {deny, kindLogsCollect, map[string]string{"lines": "5001"}, agentv1.CommandStatus_COMMAND_STATUS_FAILED, "from 1 to 5000", false},
		"logs not a number":       {deny, kindLogsCollect, map[string]string{"lines": "all"}, agentv1.CommandStatus_COMMAND_STATUS_FAILED, "from 1 to 5000", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := testNode(t, tt.hw)
			n.rebootCmd = []string{"true"} // never the host's
			for i := range 10 {
				n.log.Info("line " + string(rune('0'+i)))
			}
			res, after := runKind(t, n, tt.kind, tt.args)
			if res.GetStatus() != tt.status || !strings.Contains(res.GetOutput()+res.GetError(), tt.contains) {
				t.Errorf("result = %v", res)
			}
			if (after != nil) != tt.simulated {
				t.Errorf("simulated reboot follows: %v, want %v", after != nil, tt.simulated)
			}
			if tt.kind == kindLogsCollect && tt.status == agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED && strings.Contains(res.GetOutput(), "line 7") {
				t.Errorf("lines=2 returned more: %q", res.GetOutput())
			}
		})
	}
}

func TestBoundOutput(t *testing.T) {
	t.Parallel()
	if got := boundOutput("short"); got != "short" {
		t.Errorf("short output changed: %q", got)
	}
	var b strings.Builder
	for i := 0; b.Len() < 3*maxOutput; i++ {
		b.WriteString(strings.Repeat("x", 70) + "\n")
	}
	b.WriteString("the end\n")
	got := boundOutput(b.String())
	if len(got) > maxOutput {
		t.Errorf("%d bytes, want at most %d", len(got), maxOutput)
	}
	if !strings.HasSuffix(got, "the end\n") || !strings.HasPrefix(got, "[") || !strings.Contains(got, "bytes before this were dropped]\nxxx") {
		t.Errorf("bounded output: head %q, tail %q", got[:80], got[len(got)-20:])
	}
	if got := boundOutput("a\xffb\x00c"); got != "a\uFFFDb\uFFFDc" {
		t.Errorf("short output with invalid UTF-8 and NUL: %q", got)
	}
	// Each invalid byte grows to three: the bound still holds.
	got = boundOutput(strings.Repeat("\xff", maxOutput))
	if len(got) > maxOutput || !utf8.ValidString(got) {
		t.Errorf("invalid output bounded to %d bytes (want at most %d), valid UTF-8: %v", len(got), maxOutput, utf8.ValidString(got))
	}
}

// A command's output is journaled and sent whatever bytes it printed:
// invalid UTF-8 (which protobuf refuses) and NUL (which PostgreSQL
// refuses) become U+FFFD.
func TestCommandOutputBytes(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	n := newTestNodeOn(joinedDir(t, gw), onFixtureHost(filepath.Join(t.TempDir(), "no-nvidia-smi")))
	n.rebootCmd = []string{"sh", "-c", `printf 'bad \377 nul \000 end'`} // a real host's reboot, confirmed
	runNode(t, n)
	s := gw.session(t)
	_ = s.send(command("c1", kindNodeReboot, map[string]string{"confirm": "yes"}))
	r := s.next(t, isResult).GetCommandResult()
	if want := "reboot requested from systemd\nbad \uFFFD nul \uFFFD end"; r.GetStatus() != agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED || r.GetOutput() != want {
		t.Errorf("result = %v, want output %q", r, want)
	}
	if e, ok, err := n.journal.lookup("c1"); err != nil || !ok || e.state != stateFinished {
		t.Errorf("journal: %v, %v, %v; want c1 finished", e, ok, err)
	}
}

// logs.collect never returns more than the bound, whatever it gathers.
func TestLogsCollectBounded(t *testing.T) {
	t.Parallel()
	n := testNode(t, inventory.GenerateFakeHW("t", 0, 1, ""))
	for range logRingSize {
		n.log.Info(strings.Repeat("y", 200))
	}
	res, _ := runKind(t, n, kindLogsCollect, map[string]string{"lines": "5000"})
	if res.GetStatus() != agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED || len(res.GetOutput()) > maxOutput || len(res.GetOutput()) < maxOutput/2 {
		t.Errorf("status %v, %d bytes", res.GetStatus(), len(res.GetOutput()))
	}
}
