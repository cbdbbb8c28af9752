package agent

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logRingSize is how many of its own log lines bcd keeps for logs.collect:
// enough to cover the minutes before a problem, small enough to forget.
const logRingSize = 1000

// LogRing keeps the last log lines of the process in memory, so that the
// logs.collect command can return them without a log file. One ring serves
// every agent of a process (bcd sim keeps one, not one per agent); lines
// carry the node id of the agent that logged them, so each agent collects
// its own.
type LogRing struct {
	mu    sync.Mutex // guards lines and next
	lines []ringLine // a circular buffer of up to logRingSize lines
	next  int        // where the next line goes once lines is full
}

type ringLine struct {
	node string // the "node" attribute of the logger, "" for process lines
	text string
}

// NewLogRing returns an empty ring.
func NewLogRing() *LogRing { return &LogRing{} }

func (r *LogRing) add(node, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) < logRingSize {
		r.lines = append(r.lines, ringLine{node, text})
		return
	}
	r.lines[r.next] = ringLine{node, text}
	r.next = (r.next + 1) % logRingSize
}

// tail returns up to n of the newest lines logged for node (and the lines of
// no node, which concern the whole process), oldest first.
func (r *LogRing) tail(node string, n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i := len(r.lines) - 1; i >= 0 && len(out) < n; i-- {
		l := r.lines[(r.next+i)%len(r.lines)]
		if l.node == "" || l.node == node {
			out = append(out, l.text)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Handler returns a slog.Handler that records each line in the ring (all
// levels from min) and passes it on to next (nil: ring only).
func (r *LogRing) Handler(next slog.Handler, min slog.Level) slog.Handler {
	return &ringHandler{ring: r, next: next, min: min}
}

// ringHandler tees records into a LogRing, formatted as slog's text
// handler formats them.
type ringHandler struct {
	ring    *LogRing
	next    slog.Handler // nil: none
	min     slog.Level
	node    string // the value of a top-level "node" attribute
	grouped bool   // a group was opened: later attributes are not top-level
	// ops replays WithAttrs and WithGroup, in their order, on the text
	// handler that formats each line.
	ops []func(slog.Handler) slog.Handler
}

// Enabled implements slog.Handler: a record is wanted by the ring or by next.
func (h *ringHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min || (h.next != nil && h.next.Enabled(ctx, l))
}

// Handle implements slog.Handler.
func (h *ringHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= h.min {
		var buf bytes.Buffer
		var th slog.Handler = slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: h.min})
		for _, op := range h.ops {
			th = op(th)
		}
		_ = th.Handle(ctx, rec)
		h.ring.add(h.node, strings.TrimSuffix(buf.String(), "\n"))
	}
	if h.next != nil && h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

// WithAttrs implements slog.Handler, noting a top-level "node" attribute.
func (h *ringHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.ops = append(h.ops[:len(h.ops):len(h.ops)], func(t slog.Handler) slog.Handler { return t.WithAttrs(as) })
	for _, a := range as {
		if a.Key == "node" && !h.grouped {
			c.node = a.Value.String()
		}
	}
	if h.next != nil {
		c.next = h.next.WithAttrs(as)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *ringHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.grouped = true
	c.ops = append(h.ops[:len(h.ops):len(h.ops)], func(t slog.Handler) slog.Handler { return t.WithGroup(name) })
	if h.next != nil {
		c.next = h.next.WithGroup(name)
	}
	return &c
}
