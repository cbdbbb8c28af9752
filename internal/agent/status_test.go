package agent

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStatusSocket(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)

	if _, err := ReadStatus(dir); !errors.Is(err, errNoDaemon) || !strings.Contains(err.Error(), "bcd node --data-dir "+dir) {
		t.Errorf("no daemon: %v", err)
	}
	// A socket file left by a bcd that died is replaced.
	ln, err := net.Listen("unix", filepath.Join(dir, socketFile))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := ReadStatus(dir); !errors.Is(err, errNoDaemon) {
		t.Errorf("stale socket: %v", err)
	}

	n := startNode(t, dir, func(c *Config) { c.StatusSocket = true })
	s := gw.session(t)
	waitFor(t, "a heartbeat both ways", func() bool {
		st := n.Status()
		return !st.LastHeartbeatSent.IsZero() && !st.LastHeartbeatReceived.IsZero()
	})
	st, err := ReadStatus(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID != "n-test1" || st.State != "connected" || st.Gateway != gw.addr || st.SessionEpoch != s.epoch ||
		st.CertificateNotAfter.IsZero() || st.JournalBytes == 0 || st.BootID == "" {
		t.Errorf("status = %+v", st)
	}
	if fi, err := os.Stat(filepath.Join(dir, socketFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v, %v", fi.Mode(), err)
	}

	var out bytes.Buffer
	if err := printStatus(&out, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NODE", "n-test1", "STATE", "connected", "SESSION EPOCH", "LAST HEARTBEAT RECEIVED", "CERTIFICATE NOT AFTER", "JOURNAL", "0 ids"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// bcd status through the command line, both formats.
	out.Reset()
	if err := Execute(t.Context(), []string{"status", "--data-dir", dir, "-o", "json"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"state": "connected"`) {
		t.Errorf("json:\n%s", out.String())
	}

	_ = n.stop(t)
	if _, err := os.Stat(filepath.Join(dir, socketFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket outlived the node: %v", err)
	}
}
