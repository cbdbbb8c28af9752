package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is the CLI's file of server contexts, by default
// $XDG_CONFIG_HOME/better-compute/config.yaml. It holds tokens, so it is
// written 0600 in a 0700 directory.
type Config struct {
	// CurrentContext names the context used when none is chosen.
	CurrentContext string `json:"current-context,omitempty"`
	// Contexts are the servers this user talks to.
	Contexts []Context `json:"contexts,omitempty"`
}

// Context is one server and the credential to use with it.
type Context struct {
	// Name identifies the context, as in --context NAME.
	Name string `json:"name"`
	// Server is the base URL, such as http://127.0.0.1:7400.
	Server string `json:"server"`
	// Token is the API token; empty for none.
	Token string `json:"token,omitempty"`
}

// ParseConfig reads a config file's contents. Unknown fields are refused so
// that a typo does not silently drop a setting.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), "\n", " "))
	}
	seen := make(map[string]bool, len(c.Contexts))
	for i, ctx := range c.Contexts {
		switch {
		case ctx.Name == "":
			return nil, fmt.Errorf("context %d has no name", i+1)
		case seen[ctx.Name]:
			return nil, fmt.Errorf("context %q appears twice", ctx.Name)
		case ctx.Server == "":
			return nil, fmt.Errorf("context %q has no server", ctx.Name)
		}
		seen[ctx.Name] = true
	}
	if c.CurrentContext != "" && !seen[c.CurrentContext] {
		return nil, fmt.Errorf("current-context %q is not one of the contexts", c.CurrentContext)
	}
	return &c, nil
}

// LoadConfig reads the config file at path; a missing file is an empty config.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CLI config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("CLI config %s: %w; fix or remove the file", path, err)
	}
	return c, nil
}

// Save writes c to path atomically, readable by its owner only.
func (c *Config) Save(path string) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode CLI config: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create CLI config dir: %w", err)
	}
	f, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("write CLI config: %w", err)
	}
	defer os.Remove(f.Name()) // no-op once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write CLI config: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write CLI config: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write CLI config: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write CLI config: %w", err)
	}
	return nil
}

// Find returns the context called name.
func (c *Config) Find(name string) (Context, bool) {
	for _, ctx := range c.Contexts {
		if ctx.Name == name {
			return ctx, true
		}
	}
	return Context{}, false
}

// Upsert adds ctx or replaces the context of the same name.
func (c *Config) Upsert(ctx Context) {
	for i := range c.Contexts {
		if c.Contexts[i].Name == ctx.Name {
			c.Contexts[i] = ctx
			return
		}
	}
	c.Contexts = append(c.Contexts, ctx)
}

// defaultConfigPath follows the XDG base directory convention.
func defaultConfigPath(getenv func(string) string) string {
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "better-compute", "config.yaml")
}

// defaultDataDir is where `dev` keeps its data unless told otherwise.
func defaultDataDir(getenv func(string) string) string {
	dir := getenv("XDG_DATA_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "better-compute", "dev")
}
