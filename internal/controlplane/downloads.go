package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
)

// bcdDownload is the bcd binary this server hands to nodes: the one built
// with it, so a node runs the version its control plane speaks.
type bcdDownload struct {
	path   string // the binary on disk
	sha256 string // hex; computed once at start
	name   string // e.g. bcd-linux-amd64
}

// findBcd locates the bcd binary to serve: the given path, or bcd beside
// the running better-compute. It returns nil (and no error) when there is
// none by default, since dev runs through `go run` have no bcd binary.
func findBcd(explicit string) (*bcdDownload, error) {
	path := explicit
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil
		}
		path = filepath.Join(filepath.Dir(exe), "bcd")
		if _, err := os.Stat(path); err != nil {
			return nil, nil
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--bcd-binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("--bcd-binary: %w", err)
	}
	return &bcdDownload{path: path, sha256: hex.EncodeToString(h.Sum(nil)), name: "bcd-" + runtime.GOOS + "-" + runtime.GOARCH}, nil
}

// mount serves the binary and its checksum under /downloads/.
func (d *bcdDownload) mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /downloads/"+d.name, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Checksum-Sha256", d.sha256)
		http.ServeFile(w, r, d.path)
	})
	mux.HandleFunc("GET /downloads/"+d.name+".sha256", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s  %s\n", d.sha256, d.name)
	})
}
