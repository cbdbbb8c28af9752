//go:build unix

package agent

import (
	"fmt"
	"syscall"
)

// fdsPerAgent is what one simulated agent holds open: its session's socket
// and its journal's file, with room for the files a join or a converger
// pass opens for a moment.
const fdsPerAgent = 2

// checkFDLimit refuses a fleet the process could not hold open: past the
// limit, agents fail one by one with "too many open files" long after the
// start, which reads as a control-plane fault.
func checkFDLimit(agents int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil // cannot tell: let the agents try
	}
	need := uint64(agents*fdsPerAgent + 256)
	if need > lim.Cur {
		return fmt.Errorf("sim: %d agents need about %d open files, and this process may open %d (ulimit -n): run fewer agents per bcd sim, in several processes", agents, need, lim.Cur)
	}
	return nil
}
