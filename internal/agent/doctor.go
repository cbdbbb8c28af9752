package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// maxSkew is the clock skew doctor tolerates: certificates are backdated a
// minute, but command deadlines and heartbeats are judged in seconds.
const maxSkew = 2 * time.Second

// Check outcomes.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "FAIL"
)

// checkResult is one line of bcd doctor.
type checkResult struct {
	name, outcome, detail, fix string
}

// doctor checks a node's setup. Its fields let tests point it elsewhere.
type doctor struct {
	dataDir    string
	now        func() time.Time
	lookPath   func(string) (string, error) // exec.LookPath
	cgroupFile string                       // /sys/fs/cgroup/cgroup.controllers
}

func newDoctor(dataDir string) *doctor {
	return &doctor{dataDir: dataDir, now: time.Now, lookPath: exec.LookPath, cgroupFile: "/sys/fs/cgroup/cgroup.controllers"}
}

// run prints one line per check and fails when any check failed.
func (d *doctor) run(ctx context.Context, w io.Writer) error {
	var results []checkResult
	id, idRes := d.checkIdentity()
	results = append(results, idRes...)
	if id != nil {
		results = append(results, d.checkGateway(ctx, id)...)
	}
	results = append(results, d.checkNvidiaSMI(), d.checkCgroup())
	failed := 0
	for _, r := range results {
		line := fmt.Sprintf("%-4s  %s: %s", r.outcome, r.name, r.detail)
		if r.fix != "" && r.outcome != checkOK {
			line += "\n      fix: " + r.fix
		}
		fmt.Fprintln(w, line)
		if r.outcome == checkFail {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("doctor: %d of %d checks failed", failed, len(results))
	}
	return nil
}

// checkIdentity checks the key's mode and the certificate's validity.
func (d *doctor) checkIdentity() (*identity, []checkResult) {
	rejoin := fmt.Sprintf("remove %s and run 'BCD_JOIN_TOKEN=T bcd join --server URL --data-dir %s'", d.dataDir, d.dataDir)
	id, err := loadIdentity(d.dataDir, nil)
	if err != nil {
		return nil, []checkResult{{"identity", checkFail, err.Error(), rejoin}}
	}
	var out []checkResult
	fi, err := os.Stat(filepath.Join(d.dataDir, keyFile))
	switch {
	case err != nil:
		out = append(out, checkResult{"identity", checkFail, err.Error(), rejoin})
	case fi.Mode().Perm()&0o077 != 0:
		out = append(out, checkResult{"identity", checkFail,
			fmt.Sprintf("node %s, but its key is readable by others (mode %v)", id.config.NodeID, fi.Mode().Perm()),
			"chmod 600 " + filepath.Join(d.dataDir, keyFile) + ", and consider the key leaked: revoke the node and join again"})
	default:
		out = append(out, checkResult{"identity", checkOK, fmt.Sprintf("node %s, key mode 0600", id.config.NodeID), ""})
	}
	leaf, now := id.cert.Leaf, d.now()
	life, left := leaf.NotAfter.Sub(leaf.NotBefore), leaf.NotAfter.Sub(now)
	renewFix := "bcd node renews at 60% of the lifetime: check that it runs ('bcd status') and reaches the gateway; if the certificate expired, remove " + d.dataDir + " and join again"
	switch {
	case now.Before(leaf.NotBefore):
		out = append(out, checkResult{"certificate", checkFail, fmt.Sprintf("not valid before %v; this host's clock is behind", leaf.NotBefore.UTC()), "fix the clock (timedatectl set-ntp true)"})
	case left <= 0:
		out = append(out, checkResult{"certificate", checkFail, fmt.Sprintf("expired %v", leaf.NotAfter.UTC()), renewFix})
	case left < life/5:
		out = append(out, checkResult{"certificate", checkFail, fmt.Sprintf("expires in %v, past its renewal time", left.Round(time.Second)), renewFix})
	default:
		out = append(out, checkResult{"certificate", checkOK, fmt.Sprintf("valid until %v (%v left)", leaf.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Minute)), ""})
	}
	return id, out
}

// checkGateway makes a TLS handshake with the node certificate and reads
// the server's Date for the clock skew. It asks for HTTP (h2), never the
// session protocol: a doctor's session would supersede the running one.
func (d *doctor) checkGateway(ctx context.Context, id *identity) []checkResult {
	addr := id.config.GatewayAddresses[0]
	host, _, _ := net.SplitHostPort(addr)
	tr := h2Transport(&tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: id.roots, ServerName: host,
		Certificates: []tls.Certificate{id.cert},
	})
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/", nil)
	sent := d.now()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return []checkResult{
			{"gateway", checkFail, fmt.Sprintf("%s: %v", addr, err), "check the network path to " + addr + " (firewall, DNS) and that the control plane runs"},
			{"clock skew", checkWarn, "not measured: the gateway is unreachable", ""},
		}
	}
	resp.Body.Close()
	received := d.now()
	out := []checkResult{{"gateway", checkOK, addr + " accepts the node certificate (TLS 1.3)", ""}}
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return append(out, checkResult{"clock skew", checkWarn, "the gateway sent no usable Date header", ""})
	}
	// Date has one-second resolution: the server's clock was in
	// [date, date+1s) when it answered, between sent and received.
	lo := sent.Sub(date.Add(time.Second))
	hi := received.Sub(date)
	skew := lo
	if lo < 0 && hi > 0 {
		skew = 0
	} else if hi <= 0 {
		skew = hi
	}
	if skew > maxSkew || skew < -maxSkew {
		return append(out, checkResult{"clock skew", checkFail, fmt.Sprintf("this host is %v off the gateway's clock", skew.Round(time.Millisecond)), "synchronize the clock (timedatectl set-ntp true, or chrony)"})
	}
	return append(out, checkResult{"clock skew", checkOK, fmt.Sprintf("within %v of the gateway", maxSkew), ""})
}

// checkNvidiaSMI warns, never fails: a CPU-only node is valid.
func (d *doctor) checkNvidiaSMI() checkResult {
	p, err := d.lookPath("nvidia-smi")
	if err != nil {
		return checkResult{"nvidia-smi", checkWarn, "not found: the node reports no GPUs", "install the NVIDIA driver if this host has GPUs"}
	}
	return checkResult{"nvidia-smi", checkOK, p, ""}
}

// checkCgroup requires the unified cgroup hierarchy, which the convergers
// rely on to confine workloads.
func (d *doctor) checkCgroup() checkResult {
	if _, err := os.Stat(d.cgroupFile); err != nil {
		detail := "cgroup v2 is not mounted (" + d.cgroupFile + " is missing)"
		if !errors.Is(err, os.ErrNotExist) {
			detail = err.Error()
		}
		return checkResult{"cgroup v2", checkFail, detail, "boot with systemd.unified_cgroup_hierarchy=1 (the default on current distributions)"}
	}
	return checkResult{"cgroup v2", checkOK, "mounted", ""}
}
