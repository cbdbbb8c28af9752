package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, wantErr string
	}{
		{"empty", "", ""},
		{"one context", "current-context: dev\ncontexts:\n- name: dev\n  server: http://127.0.0.1:7400\n", ""},
		{"unknown field", "contexts:\n- name: dev\n  server: http://x\n  tokn: abc\n", `unknown field "tokn"`},
		{"no name", "contexts:\n- server: http://x\n", "context 1 has no name"},
		{"no server", "contexts:\n- name: a\n", `context "a" has no server`},
		{"duplicate", "contexts:\n- {name: a, server: http://x}\n- {name: a, server: http://y}\n", `context "a" appears twice`},
		{"dangling current", "current-context: prod\n", `current-context "prod" is not one of the contexts`},
		{"not yaml", "{{{", "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tt.in))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ParseConfig: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("ParseConfig error = %v, want it to contain %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("current-context: dev\ncontexts:\n- name: dev\n  server: http://127.0.0.1:7400\n  token: bc_x\n"))
	f.Add([]byte("contexts: [{name: a, server: b}]"))
	f.Add([]byte("- 1\n- 2"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		// What parses must survive a save and a load unchanged.
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := c.Save(path); err != nil {
			t.Fatal(err)
		}
		back, err := LoadConfig(path)
		if err != nil {
			t.Fatalf("reload: %v", err)
		}
		if back.CurrentContext != c.CurrentContext || len(back.Contexts) != len(c.Contexts) {
			t.Fatalf("round trip changed the config: %+v -> %+v", c, back)
		}
	})
}

func TestSaveIsPrivate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "config.yaml")
	c := &Config{CurrentContext: "a", Contexts: []Context{{Name: "a", Server: "http://x", Token: "bc_secret"}}}
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode = %v, want %v", p, got, want)
		}
	}
}

func TestTarget(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	c := &Config{CurrentContext: "dev", Contexts: []Context{
		{Name: "dev", Server: "http://127.0.0.1:7400", Token: "bc_dev"},
		{Name: "prod", Server: "https://compute.example.com", Token: "bc_prod"},
	}}
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                string
		context, server     string
		env                 map[string]string
		wantServer, wantTok string
		wantErr             string
	}{
		{name: "current context", wantServer: "http://127.0.0.1:7400", wantTok: "bc_dev"},
		{name: "chosen context", context: "prod", wantServer: "https://compute.example.com", wantTok: "bc_prod"},
		{name: "unknown context", context: "staging", wantErr: `no context "staging"`},
		{name: "server flag drops the context token", server: "http://10.0.0.1:7400", wantServer: "http://10.0.0.1:7400"},
		{name: "same server keeps the token", server: "http://127.0.0.1:7400", wantServer: "http://127.0.0.1:7400", wantTok: "bc_dev"},
		{name: "token from env", env: map[string]string{"BETTER_COMPUTE_TOKEN": "bc_env"}, wantServer: "http://127.0.0.1:7400", wantTok: "bc_env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := &globals{env: Env{Getenv: func(k string) string { return tt.env[k] }}, configPath: path, context: tt.context, server: tt.server}
			server, tok, err := g.target()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if server != tt.wantServer || tok != tt.wantTok {
				t.Errorf("target = %q, %q; want %q, %q", server, tok, tt.wantServer, tt.wantTok)
			}
		})
	}

	g := &globals{env: Env{Getenv: func(string) string { return "" }}, configPath: filepath.Join(dir, "missing.yaml")}
	if _, _, err := g.target(); err == nil || !strings.Contains(err.Error(), "no server configured") {
		t.Errorf("no config: err = %v", err)
	}
}
