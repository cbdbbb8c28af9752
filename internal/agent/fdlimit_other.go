//go:build !unix

package agent

// checkFDLimit has no limit to check where there is no RLIMIT_NOFILE.
func checkFDLimit(int) error { return nil }
