package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"
)

// Status is what a running agent says about itself: bcd status prints it,
// read from the status socket; in-process callers use Node.Status.
type Status struct {
	// NodeID is the node's id.
	NodeID string `json:"node_id"`
	// State is connecting, connected, backoff or stopped.
	State string `json:"state"`
	// Gateway is the address of the gateway last dialed.
	Gateway string `json:"gateway"`
	// SessionEpoch is the epoch of the last Welcome (0: none yet).
	SessionEpoch int64 `json:"session_epoch"`
	// LastHeartbeatSent and LastHeartbeatReceived are zero until the first.
	LastHeartbeatSent     time.Time `json:"last_heartbeat_sent"`
	LastHeartbeatReceived time.Time `json:"last_heartbeat_received"`
	// ClockSkewMillis is the local clock minus the gateway's, measured at
	// the last Welcome (the one-way delay is not subtracted).
	ClockSkewMillis int64 `json:"clock_skew_ms"`
	// SpecGeneration is the spec generation the node holds.
	SpecGeneration int64 `json:"spec_generation"`
	// CertificateNotAfter is when the node certificate expires.
	CertificateNotAfter time.Time `json:"certificate_not_after"`
	// BootID is the boot id the node reports.
	BootID string `json:"boot_id"`
	// JournalEntries, JournalUnacked and JournalBytes size the journal.
	JournalEntries int   `json:"journal_entries"`
	JournalUnacked int   `json:"journal_unacked"`
	JournalBytes   int64 `json:"journal_bytes"`
	// LastError is why the last session ended, while not connected.
	LastError string `json:"last_error,omitempty"`
}

// Status reports the agent's state. It is meaningful once Run has started.
func (n *Node) Status() Status {
	var st Status
	if id := n.id.Load(); id != nil {
		st.NodeID = id.config.NodeID
		st.CertificateNotAfter = id.cert.Leaf.NotAfter
	}
	st.BootID = n.bootID()
	n.mu.Lock()
	defer n.mu.Unlock()
	if j := n.openJournal; j != nil {
		st.SpecGeneration, _ = j.specGeneration()
		if js, err := j.stats(); err == nil {
			st.JournalEntries, st.JournalUnacked, st.JournalBytes = js.Entries, js.Unacked, js.Bytes
		}
	}
	st.State, st.Gateway, st.SessionEpoch = n.state, n.gateway, n.epoch
	st.LastHeartbeatSent, st.LastHeartbeatReceived = n.hbSent, n.hbRecv
	st.ClockSkewMillis = n.skew.Milliseconds()
	if n.state != "connected" {
		st.LastError = n.lastErr
	}
	return st
}

// serveStatus listens on DataDir/bcd.sock (0600: the status names the node
// and its gateway) and answers each connection with the Status as JSON. It
// returns a function that stops it.
func (n *Node) serveStatus() (stop func(), err error) {
	path := filepath.Join(n.cfg.DataDir, socketFile)
	// A socket file left by a bcd that died answers nothing: replace it.
	// One that answers belongs to a running bcd, which keeps it.
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another bcd node is running on %s (it answers on %s)", n.cfg.DataDir, path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on the status socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict the status socket: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by stop
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_ = json.NewEncoder(c).Encode(n.Status())
			c.Close()
		}
	}()
	return func() {
		ln.Close() // also removes the socket file
		<-done
	}, nil
}

// errNoDaemon means no bcd node answers on a data dir.
var errNoDaemon = errors.New("no bcd node is running")

// ReadStatus asks the bcd node running on dataDir for its Status.
func ReadStatus(dataDir string) (Status, error) {
	var st Status
	path := filepath.Join(dataDir, socketFile)
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return st, fmt.Errorf("%w on %s (nothing answers on %s): start it with 'bcd node --data-dir %s' or 'systemctl start bcd'", errNoDaemon, dataDir, path, dataDir)
		}
		return st, fmt.Errorf("ask bcd node on %s: %w", path, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewDecoder(c).Decode(&st); err != nil {
		return st, fmt.Errorf("read the status from %s: %w", path, err)
	}
	return st, nil
}

// printStatus writes st as a two-column table.
func printStatus(w io.Writer, st Status, now time.Time) error {
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.Local().Format(time.RFC3339) + " (" + now.Sub(t).Round(time.Second).String() + " ago)"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rows := [][2]string{
		{"NODE", st.NodeID},
		{"STATE", st.State},
		{"GATEWAY", st.Gateway},
		{"SESSION EPOCH", fmt.Sprint(st.SessionEpoch)},
		{"LAST HEARTBEAT SENT", ago(st.LastHeartbeatSent)},
		{"LAST HEARTBEAT RECEIVED", ago(st.LastHeartbeatReceived)},
		{"CLOCK SKEW", (time.Duration(st.ClockSkewMillis) * time.Millisecond).String()},
		{"SPEC GENERATION", fmt.Sprint(st.SpecGeneration)},
		{"CERTIFICATE NOT AFTER", st.CertificateNotAfter.Local().Format(time.RFC3339) + " (in " + st.CertificateNotAfter.Sub(now).Round(time.Minute).String() + ")"},
		{"BOOT ID", st.BootID},
		{"JOURNAL", fmt.Sprintf("%d ids, %d unacknowledged, %d bytes", st.JournalEntries, st.JournalUnacked, st.JournalBytes)},
	}
	if st.LastError != "" {
		rows = append(rows, [2]string{"LAST ERROR", st.LastError})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}
