package agent

import (
	"crypto"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/devices"
	"github.com/better-compute/better-compute/internal/agent/inventory"
	"github.com/better-compute/better-compute/internal/pki"
)

// converger is bcd's devices converger: it makes the node's CDI directory
// hold exactly the allocations of the newest NodeSpec, records the spec in
// the journal once it is on disk, and reports what it holds as a
// SpecApplied with one signed AllocationBound per allocation.
//
// It runs in a goroutine only while there is work, like a command: a spec
// arriving while it runs replaces any spec still waiting, so that a burst
// of changes is applied once, newest last. At each session start it
// applies the spec it holds again, which repairs the directory after a
// crash or a meddling hand, and reports it, so that a binding the control
// plane missed is reported until it is recorded.
//
// A spec it could not apply (the GPUs unreadable, the directory not
// writable) is retried, with the goroutine waiting between tries, from
// retryMin doubling to retryMax, or until a newer spec comes: the gateway
// sends a spec once per session, so nothing else would apply it.
type converger struct {
	n                  *Node
	writer             devices.Writer
	retryMin, retryMax time.Duration
	wake               chan struct{} // a spec or resync came while running; buffered 1

	mu      sync.Mutex
	want    *agentv1.NodeSpec // the newest spec received and not yet applied
	resync  bool              // apply the held spec again and report it
	running bool              // a goroutine is applying
}

// Retries of a spec the converger could not apply: soon at first, since
// a driver hiccup passes in seconds, and at most every two minutes, since
// each try may wait on nvidia-smi and reports its failure.
const (
	convergeRetryMin = 2 * time.Second
	convergeRetryMax = 2 * time.Minute
)

// newConverger returns n's converger over the CDI directory dir.
func newConverger(n *Node, dir string) *converger {
	return &converger{n: n, writer: devices.Writer{Dir: dir}, retryMin: convergeRetryMin, retryMax: convergeRetryMax,
		wake: make(chan struct{}, 1)}
}

// offer queues spec, replacing any spec still waiting, and starts applying.
func (c *converger) offer(spec *agentv1.NodeSpec) {
	c.mu.Lock()
	c.want = spec
	c.startLocked()
	c.mu.Unlock()
}

// sessionStarted asks for the held spec to be applied again and reported on
// the new session.
func (c *converger) sessionStarted() {
	c.mu.Lock()
	c.resync = true
	c.startLocked()
	c.mu.Unlock()
}

func (c *converger) startLocked() {
	if c.running {
		select { // cut a wait between retries short
		case c.wake <- struct{}{}:
		default:
		}
		return
	}
	c.running = true
	c.n.work.Add(1)
	go c.run()
}

// run applies specs until none waits, retrying one it could not apply
// until the node stops.
func (c *converger) run() {
	defer c.n.work.Done()
	wait := c.retryMin
	for {
		c.mu.Lock()
		spec, resync := c.want, c.resync
		c.want, c.resync = nil, false
		select { // what woke a wait is taken now
		case <-c.wake:
		default:
		}
		if spec == nil && !resync {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		err := c.apply(spec)
		if err == nil {
			wait = c.retryMin
			continue
		}
		if c.n.runCtx.Err() == nil { // else the node is stopping, which is why
			c.n.log.Error("devices: apply the node spec; retrying", "err", err, "in", wait)
		}
		c.mu.Lock()
		if c.want == nil { // a newer spec replaces this one
			c.want = spec
		}
		c.resync = c.resync || spec == nil
		c.mu.Unlock()
		if !c.sleep(wait) {
			c.mu.Lock()
			c.running = false
			c.mu.Unlock()
			return
		}
		wait = min(2*wait, c.retryMax)
	}
}

// sleep waits d, or until a spec or resync is offered; false when the node
// stops meanwhile.
func (c *converger) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.n.runCtx.Done():
		return false
	case <-t.C:
	case <-c.wake:
	}
	return true
}

// apply makes the CDI directory hold spec (the held spec when nil) and
// reports the result on the live session, if any.
func (c *converger) apply(spec *agentv1.NodeSpec) error {
	n := c.n
	held, err := n.journal.spec()
	if err != nil {
		return fmt.Errorf("read the held spec: %w", err)
	}
	fresh := spec != nil
	if !fresh {
		spec = held
	}
	// On failure the held generation stays, so that the gateway's view of
	// what the node holds is never ahead of the disk.
	failed := func(removed []string, err error) error {
		c.report(&agentv1.SpecApplied{Generation: held.GetGeneration(), Removed: removed, Error: err.Error()}, nil)
		return err
	}
	allocs, problems, err := c.resolve(spec)
	if err != nil {
		// Binding nothing would unbind every reservation over a hiccup
		// of nvidia-smi: the directory stays as it is until a retry
		// reads the GPUs.
		return failed(nil, err)
	}
	changes, err := c.writer.Sync(allocs)
	for _, id := range changes.Written {
		n.log.Info("devices: bound reservation", "reservation", id, "cdi_device", devices.DeviceName(id))
	}
	for _, id := range changes.Removed {
		n.log.Info("devices: unbound reservation", "reservation", id)
	}
	if err != nil {
		// The directory is part way: a retry applies it again.
		return failed(changes.Removed, err)
	}
	if fresh {
		if err := n.journal.setSpec(spec); err != nil {
			return fmt.Errorf("journal spec generation %d: %w", spec.GetGeneration(), err)
		}
	} else if len(allocs) == 0 && changes.Empty() && len(problems) == 0 {
		return nil // nothing held and nothing changed: nothing to say
	}
	c.report(&agentv1.SpecApplied{
		Generation: spec.GetGeneration(), Removed: changes.Removed, Error: strings.Join(problems, "; "),
	}, allocs)
	return nil
}

// resolve maps spec's allocations to the node's GPUs. An allocation naming
// a GPU the node does not have is left out (and said so): binding the rest
// would hand a workload fewer GPUs than it reserved. GPUs it cannot read
// are an error: they are not GPUs the node does not have.
func (c *converger) resolve(spec *agentv1.NodeSpec) ([]devices.Allocation, []string, error) {
	if len(spec.GetAllocations()) == 0 {
		return nil, nil, nil
	}
	gpus, err := c.gpus()
	if err != nil {
		return nil, nil, fmt.Errorf("read the node's GPUs: %w", err)
	}
	var out []devices.Allocation
	var problems []string
	for _, a := range spec.GetAllocations() {
		if err := devices.ValidateReservationID(a.GetReservationId()); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		alloc := devices.Allocation{ReservationID: a.GetReservationId()}
		var missing []string
		for _, u := range a.GetGpuUuids() {
			if g, ok := gpus[u]; ok {
				alloc.GPUs = append(alloc.GPUs, g)
			} else {
				missing = append(missing, u)
			}
		}
		if len(missing) > 0 || len(alloc.GPUs) == 0 {
			problems = append(problems, fmt.Sprintf("reservation %s: GPUs %s are not on this node", a.GetReservationId(), strings.Join(missing, ",")))
			continue
		}
		out = append(out, alloc)
	}
	return out, problems, nil
}

// gpus returns the node's GPUs by UUID, read afresh: a spec comes rarely,
// and a GPU that fell off the bus must not be bound.
func (c *converger) gpus() (map[string]*agentv1.GPU, error) {
	read, err := inventory.GPUs(c.n.runCtx, c.n.invOptions())
	if err != nil {
		return nil, err
	}
	out := map[string]*agentv1.GPU{}
	for _, g := range read.GetDevices() {
		if g.GetUuid() != "" {
			out[g.GetUuid()] = g
		}
	}
	return out, nil
}

// report signs a claim per allocation for the live session, with the key
// of the certificate that session was opened with (the gateway verifies
// claims against it, and a renewal does not reconnect), and sends sa with
// them. Without a session it sends nothing: the next session's start
// reports the held spec, signed with that session's key.
func (c *converger) report(sa *agentv1.SpecApplied, allocs []devices.Allocation) {
	n := c.n
	s := n.current()
	if s == nil {
		return
	}
	id := s.id
	key, ok := id.cert.PrivateKey.(crypto.Signer)
	if !ok {
		n.log.Error("devices: the node key cannot sign allocation claims")
		return
	}
	for _, a := range allocs {
		b, err := signClaim(key, &agentv1.AllocationClaim{
			NodeId: id.config.NodeID, SessionEpoch: s.epoch, ReservationId: a.ReservationID,
			GpuUuids: gpuUUIDs(a.GPUs), CdiDevice: devices.DeviceName(a.ReservationID),
			SpecGeneration: sa.GetGeneration(),
		})
		if err != nil {
			n.log.Error("devices: sign an allocation claim", "reservation", a.ReservationID, "err", err)
			continue
		}
		sa.Bound = append(sa.Bound, b)
	}
	_ = s.send(&agentv1.Frame{Kind: &agentv1.Frame_SpecApplied{SpecApplied: sa}})
}

// signClaim encodes claim deterministically and signs it.
func signClaim(key crypto.Signer, claim *agentv1.AllocationClaim) (*agentv1.AllocationBound, error) {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(claim)
	if err != nil {
		return nil, err
	}
	sig, err := pki.SignAllocationClaim(key, raw)
	if err != nil {
		return nil, err
	}
	return &agentv1.AllocationBound{Claim: raw, Signature: sig}, nil
}

// gpuUUIDs returns the UUIDs of gpus, sorted as the control plane sorts a
// reservation's.
func gpuUUIDs(gpus []*agentv1.GPU) []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.GetUuid()
	}
	slices.Sort(out)
	return out
}

// cdiDir is where the converger keeps its specs: Config.CDIDir, or a cdi
// folder in the data dir.
func (cfg Config) cdiDir() string {
	if cfg.CDIDir != "" {
		return cfg.CDIDir
	}
	return filepath.Join(cfg.DataDir, "cdi")
}
