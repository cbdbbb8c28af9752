package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/better-compute/better-compute/internal/agent/inventory"
)

// defaultJoinConcurrency bounds the joins in flight during a fleet's first
// start: enough to keep one HTTP/2 connection busy, few enough not to queue
// thousands of requests on the server at once.
const defaultJoinConcurrency = 64

// SimConfig configures a fleet of simulated agents in one process.
type SimConfig struct {
	// Nodes is how many agents to run.
	Nodes int
	// Server and Token join agents that have no identity yet; Token must
	// allow that many uses. Agents joined on an earlier run reuse their
	// identities, and then neither is needed.
	Server, Token string
	// DataDir holds DataDir/sim/<i>/ for each agent and DataDir/sim/seed,
	// which keeps fake hardware identifiers stable across runs.
	DataDir string
	// GPUs and Model describe each agent's fake GPUs (0 GPUs is allowed;
	// "" is inventory.DefaultFakeGPUModel).
	GPUs  int
	Model string
	// Logger receives the fleet's log; nil discards.
	Logger *slog.Logger
	// JoinConcurrency bounds joins in flight; 0 means 64.
	JoinConcurrency int
	// HeartbeatLog logs every heartbeat (loud with many agents).
	HeartbeatLog bool
	// OnReady, when set, is called with the agents once all are joined and
	// starting; the control plane's dev stack uses it to watch them.
	OnReady func([]*Node)
}

// RunSim joins (first run) and runs cfg.Nodes agents, each with its own
// identity, journal, fake hardware and session, until ctx ends. Each agent
// is a Node, the same code as bcd node. It returns an error when joining
// fails, or after ctx ends, the errors of agents that stopped on their own
// (a revoked agent stops; the others go on).
func RunSim(ctx context.Context, cfg SimConfig) error {
	if cfg.Nodes <= 0 {
		return errors.New("sim: --nodes must be at least 1")
	}
	if err := checkFDLimit(cfg.Nodes); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ring := NewLogRing()
	log = slog.New(ring.Handler(log.Handler(), slog.LevelInfo))
	root := filepath.Join(cfg.DataDir, "sim")
	if err := ensureDir(root); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	seed, err := simSeed(root)
	if err != nil {
		return err
	}
	hw := make([]*inventory.FakeHW, cfg.Nodes)
	for i := range hw {
		hw[i] = inventory.GenerateFakeHW(seed, i, cfg.GPUs, cfg.Model)
	}
	if err := joinSim(ctx, cfg, root, hw, log); err != nil {
		return err
	}
	nodes := make([]*Node, cfg.Nodes)
	trust := newTrustCache()
	for i := range nodes {
		nodes[i] = NewNode(Config{
			DataDir: simDir(root, i), FakeHW: hw[i], Logger: log, LogRing: ring,
			HeartbeatLog: cfg.HeartbeatLog, trust: trust,
		})
	}
	log.Info("sim: starting agents", "nodes", cfg.Nodes)
	if cfg.OnReady != nil {
		cfg.OnReady(nodes)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Go(func() {
			if err := n.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("sim agent %d: %w", i, err)
				log.Error("sim: agent stopped", "agent", i, "err", err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func simDir(root string, i int) string { return filepath.Join(root, strconv.Itoa(i)) }

// SimAgentDir is the data dir of agent i of a `bcd sim` whose --data-dir
// is dataDir; its CDI specs are in DefaultCDIDir of it.
func SimAgentDir(dataDir string, i int) string { return simDir(filepath.Join(dataDir, "sim"), i) }

// DefaultCDIDir is where an agent with data dir dataDir and no CDIDir
// binds reservations.
func DefaultCDIDir(dataDir string) string { return Config{DataDir: dataDir}.cdiDir() }

// simSeed reads root/seed, creating it on the first run: fake GPU UUIDs
// and machine ids derive from it, so they stay the same across restarts
// and differ between fleets.
func simSeed(root string) (string, error) {
	path := filepath.Join(root, "seed")
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("sim: read %s: %w", path, err)
	}
	r := make([]byte, 8)
	_, _ = rand.Read(r)
	seed := hex.EncodeToString(r)
	if err := writeFileAtomic(root, "seed", []byte(seed+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("sim: %w", err)
	}
	return seed, nil
}

// joinSim joins every agent that has no identity yet, with bounded
// concurrency over one pinned connection.
func joinSim(ctx context.Context, cfg SimConfig, root string, hw []*inventory.FakeHW, log *slog.Logger) error {
	var unjoined []int
	for i := range hw {
		if _, err := readConfig(simDir(root, i)); errors.Is(err, fs.ErrNotExist) {
			unjoined = append(unjoined, i)
		} else if err != nil {
			return fmt.Errorf("sim agent %d: %w", i, err)
		}
	}
	if len(unjoined) == 0 {
		return nil
	}
	if cfg.Server == "" || cfg.Token == "" {
		return fmt.Errorf("sim: %d agents have not joined yet: pass --server and --token", len(unjoined))
	}
	j, err := newJoiner(cfg.Server, cfg.Token)
	if err != nil {
		return err
	}
	defer j.close()
	log.Info("sim: joining agents", "count", len(unjoined))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conc := cfg.JoinConcurrency
	if conc <= 0 {
		conc = defaultJoinConcurrency
	}
	sem := make(chan struct{}, conc)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // guards firstErr
		firstErr error
	)
	for _, i := range unjoined {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := j.join(ctx, JoinConfig{DataDir: simDir(root, i), FakeHW: hw[i]})
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("sim agent %d: %w", i, err)
				}
				mu.Unlock()
				cancel() // one refusal (token used up, pin) refuses them all
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return firstErr
}
