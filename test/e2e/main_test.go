// Package e2e runs the real binaries as separate processes, the way an
// operator does, against both store engines.
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binaries are the paths of the binaries built for this run.
var binaries struct {
	betterCompute, bcd string
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "bc-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binaries.betterCompute = filepath.Join(dir, "better-compute")
	binaries.bcd = filepath.Join(dir, "bcd")
	for out, pkg := range map[string]string{binaries.betterCompute: "./cmd/better-compute", binaries.bcd: "./cmd/bcd"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = filepath.Join("..", "..")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, stderr.String())
			return 1
		}
	}
	return m.Run()
}
