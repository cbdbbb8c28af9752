package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/inventory"
)

// defaultReportInterval is how often a session sends a StatusReport
// (hashes only for unchanged sections) besides the one at its start.
const defaultReportInterval = time.Minute

// fakeRebootDelay is how long a simulated reboot keeps a fakehw node away.
const fakeRebootDelay = 2 * time.Second

// Config configures one agent. Only DataDir is required.
type Config struct {
	// DataDir holds the identity (from Join), the journal and the status
	// socket.
	DataDir string
	// FakeHW, when set, replaces the hardware edge with a description and
	// makes node.reboot a simulated reboot (DESIGN.md §7).
	FakeHW *inventory.FakeHW
	// Logger receives the agent's log; nil discards. Every line carries
	// node=<id>.
	Logger *slog.Logger
	// LogRing is where logs.collect reads the agent's recent log lines.
	// When set, Logger must already feed it (LogRing.Handler); when nil,
	// the agent keeps a ring of its own and tees Logger into it.
	LogRing *LogRing
	// StatusSocket makes Run answer `bcd status` on DataDir/bcd.sock.
	// bcd node sets it; in-process fleets (bcd sim, dev) leave it off.
	StatusSocket bool
	// HeartbeatLog logs every heartbeat sent and received.
	HeartbeatLog bool
	// InventoryRoot and NvidiaSMI are passed to the inventory collector
	// ("" means "/" and nvidia-smi from PATH).
	InventoryRoot, NvidiaSMI string
	// ReportInterval is how often a periodic StatusReport is sent; 0 means
	// a minute.
	ReportInterval time.Duration
	// CDIDir is where the devices converger keeps one CDI spec per
	// reservation bound here: /etc/cdi on a real node (bcd node's default),
	// DataDir/cdi when empty, so that in-process fleets and tests never
	// touch the host's.
	CDIDir string

	trust *trustCache // shared CA bundles (bcd sim); nil parses per agent
}

// Node is one bcd agent: it holds the session to a gateway, runs commands
// at most once through its journal, reports inventory and renews its
// certificate. bcd node runs one; bcd sim and the control plane's dev
// stack run many in one process, so a Node keeps no goroutine of its own
// besides the one in Run (which is also the session's reader): heartbeats,
// periodic reports and renewals are timers whose callbacks run briefly,
// and each command, a session's first report and the devices converger
// (while it has a spec to apply or retry) run in goroutines that end with
// them.
type Node struct {
	cfg       Config
	log       *slog.Logger
	ring      *LogRing
	now       func() time.Time
	rebootCmd []string // the real host's reboot; tests replace it
	hostBoot  string   // the host's boot id, read once in Run

	id       atomic.Pointer[identity]        // swapped by a renewal; read at each dial
	tlsCache atomic.Pointer[tlsSessionCache] // TLS resumption, replaced with the certificate
	journal  *journal                        // set in Run before any session
	conv     *converger                      // the devices converger
	fresh    atomic.Bool                     // Hello.fresh_journal until a Welcome
	work     sync.WaitGroup                  // commands, renewals, first reports and the converger in flight
	runCtx   context.Context                 // Run's context, for timer callbacks

	mu            sync.Mutex    // guards the fields below
	sess          *session      // the live session; nil between sessions
	state         string        // connecting, connected, backoff, stopped
	gateway       string        // the address of the last dial
	epoch         int64         // the last Welcome's session epoch
	hbSent        time.Time     // the last heartbeat sent
	hbRecv        time.Time     // the last heartbeat received
	skew          time.Duration // local clock minus the gateway's, at Welcome
	lastErr       string        // why the last session ended
	fakeBoot      string        // boot id after a simulated reboot; "" = hostBoot
	rebootPending bool          // a simulated reboot ended the session
	renewTimer    *time.Timer   // the next renewal; nil when none is scheduled
	openJournal   *journal      // the journal while Run holds it open, for Status
	gpusChecked   bool          // the GPUs were read at least once
	gpusErr       string        // why the last read of the GPUs failed; "" when it did not
	gpusSince     time.Time     // when gpusErr last went from "" to not, or back
}

// tlsSessionCache wraps a tls.ClientSessionCache for atomic swapping.
type tlsSessionCache struct{ tls.ClientSessionCache }

// NewNode returns an agent for cfg; Run starts it.
func NewNode(cfg Config) *Node {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ring := cfg.LogRing
	if ring == nil {
		ring = NewLogRing()
		log = slog.New(ring.Handler(log.Handler(), slog.LevelInfo))
	}
	if cfg.ReportInterval <= 0 {
		cfg.ReportInterval = defaultReportInterval
	}
	n := &Node{
		cfg:       cfg,
		log:       log,
		ring:      ring,
		now:       time.Now,
		rebootCmd: []string{"systemctl", "reboot"},
		state:     "stopped",
	}
	n.conv = newConverger(n, cfg.cdiDir())
	return n
}

// ErrRevoked is returned by Run when the control plane revoked the node:
// it must not reconnect, and a new identity needs a new join.
var ErrRevoked = errors.New("the control plane revoked this node")

// Run holds the node's session until ctx ends (then it returns nil) or the
// node is revoked (ErrRevoked). It reconnects on any other loss, with
// capped exponential backoff and full jitter. It fails at once when the
// data dir holds no identity or its journal is locked by another process.
// Call it once per Node.
func (n *Node) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	id, err := loadIdentity(n.cfg.DataDir, n.cfg.trust)
	if err != nil {
		return err
	}
	n.id.Store(id)
	n.tlsCache.Store(&tlsSessionCache{tls.NewLRUClientSessionCache(1)})
	n.log = n.log.With("node", id.config.NodeID)
	n.hostBoot = readBootID(n.cfg.InventoryRoot)
	n.runCtx = ctx

	j, fresh, moved, err := openJournal(n.cfg.DataDir, n.now())
	if err != nil {
		return err
	}
	n.journal = j
	n.mu.Lock()
	n.openJournal = j
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.openJournal = nil
		n.mu.Unlock()
		j.close()
	}()
	n.fresh.Store(fresh)
	if moved != "" {
		n.log.Warn("the journal was corrupt: moved it aside and started a fresh one; the control plane will fail this node's in-flight commands", "moved_to", moved)
	} else if fresh {
		n.log.Info("started a fresh journal", "path", j.path)
	}

	if n.cfg.StatusSocket {
		stop, err := n.serveStatus()
		if err != nil {
			return err
		}
		defer stop()
	}
	n.scheduleRenewal(id)
	defer func() {
		cancel()
		n.mu.Lock()
		if n.renewTimer != nil && n.renewTimer.Stop() {
			n.work.Done() // the callback that would have ended it never runs
		}
		n.state = "stopped"
		n.mu.Unlock()
		n.work.Wait() // let running commands journal their results
	}()
	return n.loop(ctx)
}

// loop connects, holds a session, and waits before the next attempt.
func (n *Node) loop(ctx context.Context) error {
	bo := newBackoff()
	next := 0 // index of the gateway address to dial
	for {
		addrs := n.id.Load().config.GatewayAddresses
		addr := addrs[next%len(addrs)]
		lasted, err := n.runSession(ctx, addr)
		if ctx.Err() != nil {
			return nil
		}
		var ce *closeError
		if errors.As(err, &ce) && ce.reason == agentv1.CloseReason_CLOSE_REASON_REVOKED {
			n.log.Error("the control plane revoked this node; bcd will not reconnect: remove the data dir and join again with a new token", "data_dir", n.cfg.DataDir, "message", ce.message)
			return fmt.Errorf("%w (%s): remove %s and join again", ErrRevoked, ce.message, n.cfg.DataDir)
		}
		if lasted == 0 {
			next++ // never got a Welcome there: try the next gateway
		}
		bo.sessionEnded(lasted)
		wait := bo.next()
		n.mu.Lock()
		rebooted := n.rebootPending
		n.rebootPending = false
		n.state = "backoff"
		if err != nil {
			n.lastErr = err.Error()
		}
		n.mu.Unlock()
		if rebooted {
			wait = fakeRebootDelay
			n.log.Info("simulated reboot: reconnecting", "after", wait)
		} else {
			n.log.Info("session ended; reconnecting", "gateway", addr, "err", err, "after", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// readBootID reads the host's boot id; "" when it cannot.
func readBootID(root string) string {
	if root == "" {
		root = "/"
	}
	b, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// bootID is the boot id the node reports: the host's, or the simulated
// one after a fakehw reboot.
func (n *Node) bootID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fakeBoot != "" {
		return n.fakeBoot
	}
	return n.hostBoot
}

// invOptions is where the inventory is read from.
func (n *Node) invOptions() inventory.Options {
	return inventory.Options{Root: n.cfg.InventoryRoot, NvidiaSMI: n.cfg.NvidiaSMI, FakeHW: n.cfg.FakeHW, Logger: n.log}
}

// collect reads the inventory, with the simulated boot id when there is one.
// GPUs that cannot be read (nvidia-smi fails) are reported as none, as the
// control plane must not book them, and the failure is kept for the
// GPUsReadable condition, so that an operator sees why they went.
func (n *Node) collect(ctx context.Context) (*agentv1.Inventory, error) {
	o := n.invOptions()
	o.SkipGPUs = true
	inv, err := inventory.Collect(ctx, o)
	if err != nil {
		return nil, err
	}
	gpus, gerr := inventory.GPUs(ctx, n.invOptions())
	if gerr != nil {
		if ctx.Err() != nil {
			return nil, gerr
		}
		n.log.Warn("GPUs unreadable; reporting none", "err", gerr)
		gpus = &agentv1.GPUs{}
	}
	n.gpusRead(gerr)
	inv.Gpus = gpus
	if inv.Host == nil {
		inv.Host = &agentv1.Host{}
	}
	if b := n.bootID(); b != "" {
		inv.Host.BootId = b
	}
	return inv, nil
}

// gpusRead records how the last read of the GPUs went, for the
// GPUsReadable condition.
func (n *Node) gpusRead(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
		if len(msg) > maxConditionMessage {
			msg = strings.ToValidUTF8(msg[:maxConditionMessage], "")
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.gpusChecked || (n.gpusErr == "") != (msg == "") {
		n.gpusSince = n.now()
	}
	n.gpusChecked, n.gpusErr = true, msg
}

// current returns the live session, or nil.
func (n *Node) current() *session {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sess
}
