package e2e

import (
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/store"
)

// TestInstallScript runs the script `nodes install-script` prints, with
// --root and --no-start, and checks every file it wrote: the bcd the server
// was built with (checksum verified), the systemd unit, and a joined
// identity.
func TestInstallScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		if _, err := exec.LookPath("wget"); err != nil {
			t.Fatal("the install script needs curl or wget; .ci/run installs curl")
		}
	}
	f := newFleet(t, store.EngineSQLite)
	script := filepath.Join(f.admin.home, "install.sh")
	text := f.cli("nodes", "install-script", "--token", f.joinToken(1))
	if strings.Contains(text, "--token") {
		t.Error("the install script passes the join token as an argument, which every user of the host can read in the process list")
	}
	if err := os.WriteFile(script, []byte(text), 0o700); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(f.admin.home, "root")
	out, err := exec.Command("sh", script, "--root", root, "--no-start").CombinedOutput()
	if err != nil {
		t.Fatalf("install script: %v\n%s", err, out)
	}

	var files []string
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel+" "+fi.Mode().Perm().String())
		}
		return nil
	})
	want := []string{
		"etc/systemd/system/bcd.service -rw-r--r--",
		"usr/local/bin/bcd -rwxr-xr-x",
		"var/lib/bcd/ca.pem",
		"var/lib/bcd/config.json",
		"var/lib/bcd/node.crt",
		"var/lib/bcd/node.key -rw-------",
	}
	joined := strings.Join(files, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("install wrote no %q; it wrote:\n%s", w, joined)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "var/lib/bcd")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("var/lib/bcd: %v %v, want mode 0700", fi, err)
	}
	installed, _ := os.ReadFile(filepath.Join(root, "usr/local/bin/bcd"))
	built, _ := os.ReadFile(binaries.bcd)
	if sha256.Sum256(installed) != sha256.Sum256(built) {
		t.Errorf("the installed bcd (%d bytes) is not the server's bcd (%d bytes)", len(installed), len(built))
	}
	unit, _ := os.ReadFile(filepath.Join(root, "etc/systemd/system/bcd.service"))
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/bcd node --data-dir /var/lib/bcd") {
		t.Errorf("unit:\n%s", unit)
	}
	if n := len(f.nodes()); n != 1 {
		t.Errorf("%d nodes after the install script joined, want 1", n)
	}
}
