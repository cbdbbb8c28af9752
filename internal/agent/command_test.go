package agent

import (
	"bytes"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := map[string]struct {
		args []string
		want string // in the error
	}{
		"node before join":   {[]string{"node", "--data-dir", dir}, "holds no node identity: run 'BCD_JOIN_TOKEN=T bcd join"},
		"join without token": {[]string{"join", "--server", "https://gw:7443", "--data-dir", dir}, "no join token: set BCD_JOIN_TOKEN (or pass --token)"},
		"join bad server":    {[]string{"join", "--server", "gw:7443", "--token", "x", "--data-dir", dir}, "want https://host:port"},
		"join bad token":     {[]string{"join", "--server", "https://gw:7443", "--token", "bcj_nope", "--data-dir", dir}, "malformed join token"},
		"status bad format":  {[]string{"status", "--data-dir", dir, "-o", "yaml"}, "want table or json"},
		"status no daemon":   {[]string{"status", "--data-dir", dir}, "no bcd node is running"},
		"sim no nodes":       {[]string{"sim", "--nodes", "0", "--data-dir", dir}, "at least 1"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := Execute(t.Context(), tt.args, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("bcd %s: %v, want an error with %q", strings.Join(tt.args, " "), err, tt.want)
			}
		})
	}
	var out bytes.Buffer
	if err := Execute(t.Context(), []string{"version"}, &out, &out); err != nil || !strings.HasPrefix(out.String(), "bcd ") {
		t.Errorf("version: %q, %v", out.String(), err)
	}
}

// TestJoinTokenFromEnv: bcd join reads the token from BCD_JOIN_TOKEN, where
// the process list does not show it (here a malformed one, refused as such,
// which shows it was read).
func TestJoinTokenFromEnv(t *testing.T) {
	t.Setenv("BCD_JOIN_TOKEN", "bcj_nope")
	var out bytes.Buffer
	err := Execute(t.Context(), []string{"join", "--server", "https://gw:7443", "--data-dir", t.TempDir()}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "malformed join token") {
		t.Errorf("bcd join with BCD_JOIN_TOKEN set: %v, want the token read and refused as malformed", err)
	}
}
