package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"time"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/inventory"
)

const (
	// maxOutput bounds a result's output: results are journaled and travel
	// in one frame, and a person reads them.
	maxOutput = 64 << 10
	// commandTimeout bounds one command's run.
	commandTimeout = 5 * time.Minute
	// Log lines for logs.collect: the default and the most one call gets.
	defaultLogLines = 200
	maxLogLines     = 5000
)

// Command kinds.
const (
	kindInventoryRefresh = "inventory.refresh"
	kindDiagNVML         = "diag.nvml"
	kindLogsCollect      = "logs.collect"
	kindNodeReboot       = "node.reboot"
)

// handleCommand decides whether cmd may run and, if so, journals it as
// started before anything runs, then runs it on a goroutine of its own
// (which ends with the command) so the session keeps reading. It runs on
// the session's reader, so two copies of one command never race past the
// journal check.
func (n *Node) handleCommand(s *session, cmd *agentv1.Command) {
	log := n.log.With("command", cmd.GetId(), "kind", cmd.GetKind())
	e, seen, err := n.journal.lookup(cmd.GetId())
	if err != nil {
		log.Error("cannot read the journal; refusing the command", "err", err)
		return
	}
	if seen {
		// Never run an id twice. A result the gateway has not acknowledged
		// is sent again; otherwise the gateway already has it.
		if e.state == stateFinished {
			_ = s.sendResult(e.result)
		}
		log.Info("command already in the journal; not running it again", "state", e.state)
		return
	}
	if d := cmd.GetDeadline(); d != nil && n.now().After(d.AsTime()) {
		res := &agentv1.CommandResult{Id: cmd.GetId(), Status: agentv1.CommandStatus_COMMAND_STATUS_EXPIRED,
			Error: "the deadline " + d.AsTime().UTC().Format(time.RFC3339) + " passed before the node could start the command"}
		if err := n.journal.record(res); err != nil {
			log.Error("cannot journal the command", "err", err)
			return
		}
		_ = s.sendResult(res)
		return
	}
	if err := n.journal.start(cmd.GetId()); err != nil {
		log.Error("cannot journal the command; not running it", "err", err)
		return
	}
	n.work.Add(1)
	go func() {
		defer n.work.Done()
		n.execute(cmd, log)
	}()
}

// execute runs a journaled command, journals its result, and sends it on
// whatever session is live by then (or the next one, from the journal).
func (n *Node) execute(cmd *agentv1.Command, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(n.runCtx, commandTimeout)
	defer cancel()
	res, after := n.run(ctx, cmd)
	res.Id = cmd.GetId()
	if err := n.journal.finish(res); err != nil {
		// The journal keeps "started": the next start reports UNKNOWN, which
		// is the truth the node can tell.
		n.log.Error("cannot journal a command's result", "command", cmd.GetId(), "err", err)
		return
	}
	log.Info("command finished", "status", res.GetStatus())
	if s := n.current(); s != nil {
		_ = s.sendResult(res)
	}
	if after != nil {
		after()
	}
}

// run runs one command and returns its result (without id) and, for a
// simulated reboot, what to do once the result is journaled and sent.
func (n *Node) run(ctx context.Context, cmd *agentv1.Command) (*agentv1.CommandResult, func()) {
	var out string
	var err error
	var after func()
	switch cmd.GetKind() {
	case kindInventoryRefresh:
		out, err = n.refresh(ctx)
	case kindDiagNVML:
		out, err = inventory.HealthSummary(ctx, n.invOptions())
	case kindLogsCollect:
		out, err = n.collectLogs(ctx, cmd.GetArgs())
	case kindNodeReboot:
		out, after, err = n.reboot(ctx, cmd.GetArgs())
	default:
		err = fmt.Errorf("unknown command kind %q: this bcd runs %s, %s, %s and %s",
			cmd.GetKind(), kindInventoryRefresh, kindDiagNVML, kindLogsCollect, kindNodeReboot)
	}
	res := &agentv1.CommandResult{Status: agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, Output: boundOutput(out)}
	if err != nil {
		res.Status, res.Error, after = agentv1.CommandStatus_COMMAND_STATUS_FAILED, boundOutput(err.Error()), nil
	}
	return res, after
}

// boundOutput makes a command's output or error text fit to journal, send
// and store, whatever bytes the command printed: invalid UTF-8 (a protobuf
// string must be UTF-8, or the journal cannot record the result and it is
// reported UNKNOWN) and NUL (PostgreSQL text refuses it) become U+FFFD,
// replaced rather than dropped so that a reader sees something stood there.
// It then keeps the last maxOutput bytes (the end of a log or a command's
// output is what explains it), cut at a line start when one is near, and
// says how much was dropped.
func boundOutput(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= maxOutput {
		return s
	}
	note := fmt.Sprintf("[%d bytes before this were dropped]\n", len(s)-maxOutput)
	keep := s[len(s)-(maxOutput-len(note)):]
	if i := strings.IndexByte(keep, '\n'); i >= 0 && i < 1024 {
		keep = keep[i+1:]
	}
	// The cut may split a character: drop its tail rather than grow the
	// text past the bound with a U+FFFD.
	return note + strings.ToValidUTF8(keep, "")
}

// refresh collects the inventory, sends it in full, and summarizes it.
func (n *Node) refresh(ctx context.Context) (string, error) {
	inv, err := n.collect(ctx)
	if err != nil {
		return "", err
	}
	if s := n.current(); s != nil {
		if err := s.report(true); err != nil {
			n.log.Warn("sending the refreshed inventory failed; the next session sends it", "err", err)
		}
	}
	return summarize(inv), nil
}

// summarize describes an inventory on one line.
func summarize(inv *agentv1.Inventory) string {
	gpus := inv.GetGpus().GetDevices()
	g := fmt.Sprintf("%d GPUs", len(gpus))
	if len(gpus) > 0 {
		g += " (" + gpus[0].GetName() + ")"
	}
	return fmt.Sprintf("%s: %d CPUs, %d GiB memory, %d disks, %d NICs, %s",
		inv.GetHost().GetHostname(), inv.GetCpu().GetThreads(), inv.GetMemory().GetTotalBytes()>>30,
		len(inv.GetDisks()), len(inv.GetNics()), g)
}

// collectLogs returns the last lines of bcd's own log (from the ring) and,
// on a real host, of its systemd journal.
func (n *Node) collectLogs(ctx context.Context, args map[string]string) (string, error) {
	lines := defaultLogLines
	if v, ok := args["lines"]; ok {
		l, err := strconv.Atoi(v)
		if err != nil || l < 1 || l > maxLogLines {
			return "", fmt.Errorf("argument lines=%q: want a number from 1 to %d", v, maxLogLines)
		}
		lines = l
	}
	var b strings.Builder
	b.WriteString("== bcd log (in memory, newest last) ==\n")
	for _, l := range n.ring.tail(n.id.Load().config.NodeID, lines) {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if n.cfg.FakeHW == nil {
		if path, err := exec.LookPath("journalctl"); err == nil {
			jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			out, err := exec.CommandContext(jctx, path, "-u", "bcd", "-n", strconv.Itoa(lines), "--no-pager").CombinedOutput()
			b.WriteString("== journalctl -u bcd ==\n")
			b.Write(out)
			if err != nil {
				fmt.Fprintf(&b, "(journalctl: %v)\n", err)
			}
		}
	}
	return b.String(), nil
}

// reboot reboots a real host through systemd, only when confirmed; on
// fakehw it simulates one, only when the description allows it: the
// session ends once the result is sent, and the node comes back after
// fakeRebootDelay with a new boot id.
func (n *Node) reboot(ctx context.Context, args map[string]string) (string, func(), error) {
	if fhw := n.cfg.FakeHW; fhw != nil {
		if !fhw.AllowReboot {
			return "", nil, errors.New("this node's fakehw description does not allow reboots (set allowReboot: true in it)")
		}
		return "simulated reboot: the node reconnects in " + fakeRebootDelay.String() + " with a new boot id", n.simulateReboot, nil
	}
	if args["confirm"] != "yes" {
		return "", nil, errors.New("node.reboot on a real host needs the argument confirm=yes")
	}
	out, err := exec.CommandContext(ctx, n.rebootCmd[0], n.rebootCmd[1:]...).CombinedOutput()
	if err != nil {
		return "", nil, fmt.Errorf("%s: %v: %s", strings.Join(n.rebootCmd, " "), err, out)
	}
	return "reboot requested from systemd\n" + string(out), nil, nil
}

// simulateReboot gives the node a new boot id and ends the session; the
// run loop waits fakeRebootDelay before it reconnects.
func (n *Node) simulateReboot() {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	boot := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] // as the kernel's
	n.mu.Lock()
	n.fakeBoot = boot
	n.rebootPending = true
	s := n.sess
	n.mu.Unlock()
	n.log.Info("simulating a reboot", "boot_id", boot)
	if s != nil {
		s.closeWith(agentv1.CloseReason_CLOSE_REASON_SHUTDOWN, "simulated reboot")
		_ = s.conn.Close()
	}
}
