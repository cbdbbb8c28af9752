package iam

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the Authorizer's options.
const (
	// DefaultCacheSize bounds the decision cache: about a megabyte of keys
	// and decisions, far more than the distinct questions a busy minute asks.
	DefaultCacheSize = 8192
	// DefaultReloadTimeout bounds one directory load.
	DefaultReloadTimeout = 30 * time.Second
)

// AuthorizerOption tunes an Authorizer.
type AuthorizerOption func(*Authorizer)

// WithCacheSize bounds the number of cached decisions (DefaultCacheSize
// otherwise); 0 or less disables the cache.
func WithCacheSize(n int) AuthorizerOption {
	return func(a *Authorizer) {
		a.cache = nil
		if n > 0 {
			a.cache = newDecisionCache(n)
		}
	}
}

// WithReloadTimeout bounds one directory load (DefaultReloadTimeout
// otherwise).
func WithReloadTimeout(d time.Duration) AuthorizerOption {
	return func(a *Authorizer) {
		if d > 0 {
			a.reloadTimeout = d
		}
	}
}

// WithLogger sends a warning for every policy an engine had to skip to l
// (they are discarded otherwise).
func WithLogger(l *slog.Logger) AuthorizerOption {
	return func(a *Authorizer) {
		if l != nil {
			a.logger = l
		}
	}
}

// Authorizer decides API calls with an Engine that follows the store's
// authorization epoch, and remembers its decisions while the epoch stands.
//
// Every call passes the epoch it read with the caller's token. When that is
// newer than the engine's, the Authorizer loads the Directory again (once,
// however many calls arrive at the new epoch together) and builds a new
// engine before deciding, so a decision never rests on rows older than the
// ones the caller's own read saw: a revoked membership or a new forbid
// counts from the next call on, on every server. Cached decisions belong to
// one epoch, the engine's, and are dropped with it.
type Authorizer struct {
	load          func(context.Context) (Directory, error)
	reloadTimeout time.Duration
	logger        *slog.Logger

	engine atomic.Pointer[Engine] // nil until the first load

	flightMu sync.Mutex
	flight   *flight // guarded by flightMu: the load in progress, or nil

	cache *decisionCache // nil when caching is off
}

// flight is one directory load that any number of callers wait for.
type flight struct {
	done chan struct{} // closed when eng or err is set
	eng  *Engine       // the engine in force after the load
	err  error
}

// NewAuthorizer returns an Authorizer that reads the directory with load,
// usually a closure over LoadDirectory. Nothing is loaded until the first
// call.
func NewAuthorizer(load func(context.Context) (Directory, error), opts ...AuthorizerOption) *Authorizer {
	a := &Authorizer{
		load:          load,
		reloadTimeout: DefaultReloadTimeout,
		logger:        slog.New(slog.DiscardHandler),
		cache:         newDecisionCache(DefaultCacheSize),
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Engine returns the engine in force, nil before the first load.
func (a *Authorizer) Engine() *Engine { return a.engine.Load() }

// Authorize decides r with an engine at least as new as epoch, the
// authorization epoch the caller read from the store with its token. The
// error is about loading the directory, never about r: a request the engine
// cannot evaluate is a denial, with the reason in Decision.Errors.
func (a *Authorizer) Authorize(ctx context.Context, epoch int64, r Request) (Decision, error) {
	eng, err := a.engineAt(ctx, epoch)
	if err != nil {
		return Decision{}, err
	}
	if a.cache == nil {
		return eng.Authorize(r), nil
	}
	key, ok := cacheKey(r)
	if !ok {
		return eng.Authorize(r), nil // a value the key cannot spell; the engine will refuse it anyway
	}
	if d, ok := a.cache.get(eng.epoch, key); ok {
		return d.clone(), nil
	}
	d := eng.Authorize(r)
	a.cache.put(eng.epoch, key, d)
	return d.clone(), nil
}

// clone copies d's slices, so that callers may keep or change what they
// get without touching the cached decision.
func (d Decision) clone() Decision {
	d.Policies = slices.Clone(d.Policies)
	d.Errors = slices.Clone(d.Errors)
	return d
}

// engineAt returns an engine at epoch or later, loading one if needed.
func (a *Authorizer) engineAt(ctx context.Context, epoch int64) (*Engine, error) {
	for attempt := 0; ; attempt++ {
		if e := a.engine.Load(); e != nil && e.epoch >= epoch {
			return e, nil
		}
		f, started := a.joinFlight(ctx, epoch)
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("iam: wait for the authorization directory: %w", ctx.Err())
		}
		if f.err != nil {
			return nil, f.err
		}
		if f.eng.epoch >= epoch {
			return f.eng, nil
		}
		// A load that began before the caller read its epoch may predate
		// it: try once more with a fresh one. A load that began after and
		// still reads an older epoch means the store went backwards; deny
		// rather than decide on rows older than the caller's.
		if started || attempt > 0 {
			return nil, fmt.Errorf("iam: the authorization directory loaded at epoch %d, older than the caller's epoch %d", f.eng.epoch, epoch)
		}
	}
}

// joinFlight returns the load in progress, starting one if there is none;
// started reports whether this call started it. A load that ended since the
// caller looked may already have installed an engine at epoch: then it
// returns that, done, instead of loading again (a load installs its engine
// before it leaves the flight).
func (a *Authorizer) joinFlight(ctx context.Context, epoch int64) (f *flight, started bool) {
	a.flightMu.Lock()
	defer a.flightMu.Unlock()
	if a.flight != nil {
		return a.flight, false
	}
	if e := a.engine.Load(); e != nil && e.epoch >= epoch {
		f = &flight{done: make(chan struct{}), eng: e}
		close(f.done)
		return f, false
	}
	f = &flight{done: make(chan struct{})}
	a.flight = f
	// The load outlives the caller that started it: others may be waiting
	// for it, and a canceled first caller must not fail them all.
	go a.reload(context.WithoutCancel(ctx), f)
	return f, true
}

// reload loads the directory, installs a new engine if it is newer than the
// one in force, and ends the flight.
func (a *Authorizer) reload(ctx context.Context, f *flight) {
	defer func() {
		a.flightMu.Lock()
		a.flight = nil
		a.flightMu.Unlock()
		close(f.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, a.reloadTimeout)
	defer cancel()
	d, err := a.load(ctx)
	if err != nil {
		f.err = fmt.Errorf("iam: load the authorization directory: %w", err)
		return
	}
	eng, errs := NewEngine(d)
	for _, err := range errs {
		a.logger.WarnContext(ctx, "authorization engine", "epoch", d.Epoch, "err", err)
	}
	f.eng = a.install(eng)
}

// install makes eng the engine in force unless a newer one already is, and
// returns the one in force. Epochs only move forward.
func (a *Authorizer) install(eng *Engine) *Engine {
	for {
		cur := a.engine.Load()
		if cur != nil && cur.epoch >= eng.epoch {
			return cur
		}
		if a.engine.CompareAndSwap(cur, eng) {
			if a.cache != nil {
				a.cache.reset(eng.epoch)
			}
			return eng
		}
	}
}
