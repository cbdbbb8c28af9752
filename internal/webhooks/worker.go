// Package webhooks delivers a tenant's events to the HTTP endpoints it
// registered: each webhook in seq order, one event at a time, signed as the
// Standard Webhooks specification says, retried with backoff for a bounded
// time and then marked failing. The events come from the store's outbox
// (store.Event); the webhooks, their cursors and the delivery log from
// store.WebhookQuerier.
package webhooks

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
)

// Defaults of Worker's fields.
const (
	// DefaultInterval is how often the worker looks for events to deliver.
	DefaultInterval = 2 * time.Second
	// DefaultRetryFor is how long one event is retried before its webhook
	// is marked failing.
	DefaultRetryFor = 24 * time.Hour
	// DefaultBackoffBase is the wait after the first failed attempt; each
	// further failure doubles it, up to DefaultBackoffMax.
	DefaultBackoffBase = 5 * time.Second
	// DefaultBackoffMax caps the wait between attempts.
	DefaultBackoffMax = 10 * time.Minute
	// DefaultTimeout bounds one attempt, from dialing to the status line.
	DefaultTimeout = 10 * time.Second
	// DefaultParallel is how many webhooks one process delivers at once,
	// so that one slow receiver does not hold up the others.
	DefaultParallel = 8
)

// batch is how many webhooks, or events of one webhook, one query reads.
const batch = 100

// maxErrorLen bounds the error text kept in the delivery log.
const maxErrorLen = 500

// Worker delivers webhooks. Any number of processes may run one on one
// store: a webhook is delivered by the process that claims it, and its
// cursor moves by compare-and-set, so an event is never delivered as
// delivered twice nor skipped (a process that dies after the receiver
// answered and before the cursor moved makes the next one send it again,
// with the same webhook-id). A receiver that is down loses nothing: the
// cursor waits on its event.
type Worker struct {
	// Store holds the webhooks and the events; required.
	Store *store.Store
	// Sealer seals the signing secrets of new webhooks (SealSecret) and
	// opens them to sign: the Authority's (pki.Authority.Sealer), so that
	// the secrets are sealed under the deployment's key file. Required for
	// creating webhooks and for delivering any whose secret is sealed.
	Sealer *pki.Sealer
	// URLs checks the addresses dialed; its AllowPrivate permits
	// non-public receivers.
	URLs URLChecker
	// Interval between sweeps; DefaultInterval when zero.
	Interval time.Duration
	// RetryFor is how long one event is retried before the webhook is
	// marked failing; DefaultRetryFor when zero.
	RetryFor time.Duration
	// BackoffBase and BackoffMax shape the wait between attempts:
	// BackoffBase doubled per failure, capped at BackoffMax;
	// DefaultBackoffBase and DefaultBackoffMax when zero.
	BackoffBase, BackoffMax time.Duration
	// Timeout bounds one attempt; DefaultTimeout when zero.
	Timeout time.Duration
	// Parallel is how many webhooks are delivered at once;
	// DefaultParallel when zero.
	Parallel int
	// Logger receives failed attempts and errors, never a secret; nil
	// discards.
	Logger *slog.Logger

	once   sync.Once
	owner  string       // this worker's claims
	client *http.Client // dials through URLs' check
}

// Result is what one attempt at one event came to.
type Result = store.WebhookDelivery

func (w *Worker) init() {
	w.once.Do(func() {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		w.owner = hex.EncodeToString(b)
		dialer := &net.Dialer{Timeout: w.timeout(), Control: w.URLs.control}
		w.client = &http.Client{
			Transport: &http.Transport{
				// No proxy: the check must see the receiver's address,
				// not a proxy's.
				Proxy:                 nil,
				DialContext:           dialer.DialContext,
				TLSHandshakeTimeout:   w.timeout(),
				ResponseHeaderTimeout: w.timeout(),
				MaxIdleConnsPerHost:   2,
				IdleConnTimeout:       time.Minute,
			},
			// A redirect is not a delivery: the receiver must answer 2xx
			// at the URL it registered.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Timeout:       w.timeout(),
		}
	})
}

func (w *Worker) timeout() time.Duration { return cmp.Or(w.Timeout, DefaultTimeout) }

func (w *Worker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger
}

// Run sweeps until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	t := time.NewTicker(cmp.Or(w.Interval, DefaultInterval))
	defer t.Stop()
	for {
		if err := w.RunOnce(ctx); err != nil && ctx.Err() == nil {
			w.logger().Error("webhooks: deliver", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce is one sweep: every webhook that is due is delivered up to its
// newest event, or to the event its receiver refused.
func (w *Worker) RunOnce(ctx context.Context) error {
	w.init()
	now, err := w.Store.Now(ctx)
	if err != nil {
		return fmt.Errorf("webhooks: read the clock: %w", err)
	}
	due, err := w.Store.DueWebhooks(ctx, now, batch)
	if err != nil {
		return fmt.Errorf("webhooks: %w", err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards errs
		errs []error
		sem  = make(chan struct{}, cmp.Or(w.Parallel, DefaultParallel))
	)
	for _, h := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := w.deliver(ctx, h, now); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("webhooks: webhook %s: %w", h.ID, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// lease is how long a claim lasts: an attempt, and room for the store
// round trips around it.
func (w *Worker) lease() time.Duration { return 2*w.timeout() + 30*time.Second }

// deliver claims h and delivers its events after its cursor in order,
// until none is left or one fails. now is the store's clock when h was
// found due.
func (w *Worker) deliver(ctx context.Context, h store.Webhook, now time.Time) error {
	// Each claim reads the clock, and each attempt is signed as of the
	// claim before it: a previous secret that expires mid-batch stops
	// signing there.
	claim := func() (bool, error) {
		var err error
		if now, err = w.Store.Now(ctx); err != nil {
			return false, err
		}
		return w.Store.ClaimWebhook(ctx, h.ID, w.owner, h.Cursor, now.Add(w.lease()))
	}
	// Opened before the claim: a secret that does not open is the
	// server's fault, not the receiver's, so it is logged for the
	// operator and costs the webhook no attempt.
	keys, err := w.keys(h, now)
	if err != nil {
		return err
	}
	if ok, err := claim(); err != nil || !ok {
		return err // another process has it, or it moved on
	}
	defer func() {
		// Released even when ctx ended, so the next process need not
		// wait for the lease to run out.
		if err := w.Store.ReleaseWebhook(context.WithoutCancel(ctx), h.ID, w.owner); err != nil {
			w.logger().Error("webhooks: release claim", "webhook", h.ID, "err", err)
		}
	}()
	if ok, err := w.skipPruned(ctx, &h); err != nil || !ok {
		return err
	}
	for {
		evs, err := w.Store.ListEvents(ctx, store.EventFilter{After: h.Cursor, Tenant: h.Tenant, Limit: batch})
		if err != nil {
			return err
		}
		skip := h.Cursor // events up to here match no pattern
		for _, ev := range evs {
			if !Matches(h.Events, ev.Type) {
				skip = ev.Seq
				continue
			}
			if skip > h.Cursor {
				if ok, err := w.advance(ctx, &h, skip); err != nil || !ok {
					return err
				}
			}
			if ok, err := claim(); err != nil || !ok {
				return err
			}
			d, err := w.attempt(ctx, h, keys.at(now), ev, h.Attempts+1)
			if err != nil {
				return err
			}
			if !d.Delivered() {
				return w.failed(ctx, h, ev, d)
			}
			if ok, err := w.advance(ctx, &h, ev.Seq); err != nil || !ok {
				return err
			}
			skip = h.Cursor
		}
		if skip > h.Cursor {
			if ok, err := w.advance(ctx, &h, skip); err != nil || !ok {
				return err
			}
		}
		if len(evs) < batch {
			return nil
		}
	}
}

// gapType is the delivery log's event type for events pruned before they
// could be delivered.
const gapType = "webhook.gap"

// skipPruned moves h's cursor past events that were pruned before h could
// deliver them (it was failing longer than the events are kept), saying so
// in the delivery log and the server log: the loss is never silent. It
// reports false when another process moved the cursor first.
func (w *Worker) skipPruned(ctx context.Context, h *store.Webhook) (bool, error) {
	b, err := w.Store.EventBounds(ctx)
	if err != nil || b.Oldest == 0 || h.Cursor >= b.Oldest-1 {
		return err == nil, err
	}
	d := Result{
		WebhookID: h.ID, EventSeq: b.Oldest - 1, EventType: gapType, Attempt: 1,
		Error: fmt.Sprintf("events %d to %d were pruned before they could be delivered (the webhook was behind longer than events are kept); any of them for this webhook are lost", h.Cursor+1, b.Oldest-1),
	}
	if _, err := w.Store.InsertWebhookDelivery(context.WithoutCancel(ctx), d); err != nil {
		return false, err
	}
	w.logger().Warn("webhooks: events were pruned before delivery", "webhook", h.ID, "tenant", h.Tenant, "from", h.Cursor+1, "to", b.Oldest-1)
	return w.advance(ctx, h, b.Oldest-1)
}

// advance moves h's cursor to seq, and reports whether it did: false
// means another process moved it first, and this one stops.
func (w *Worker) advance(ctx context.Context, h *store.Webhook, seq int64) (bool, error) {
	ok, err := w.Store.AdvanceWebhook(ctx, h.ID, h.Cursor, seq)
	if ok {
		h.Cursor, h.Attempts, h.FailingSince, h.NextAttemptAt = seq, 0, time.Time{}, time.Time{}
	}
	return ok, err
}

// failed books a failed attempt at ev: the next attempt after the backoff,
// or, once ev has been failing for RetryFor, the webhook failing.
func (w *Worker) failed(ctx context.Context, h store.Webhook, ev store.Event, d Result) error {
	now, err := w.Store.Now(ctx)
	if err != nil {
		return err
	}
	failing := !h.FailingSince.IsZero() && now.Sub(h.FailingSince) >= cmp.Or(w.RetryFor, DefaultRetryFor)
	next := now.Add(w.backoff(d.Attempt))
	if _, err := w.Store.FailWebhookAttempt(ctx, h.ID, h.Cursor, next, failing); err != nil {
		return err
	}
	log := w.logger().With("webhook", h.ID, "tenant", h.Tenant, "seq", ev.Seq, "type", ev.Type,
		"attempt", d.Attempt, "status", d.HTTPStatus, "error", d.Error)
	if failing {
		log.Warn("webhooks: receiver kept failing; the webhook is failing until enabled", "since", h.FailingSince)
	} else {
		log.Info("webhooks: delivery failed; retrying", "next", next)
	}
	return nil
}

// backoff is the wait after failed attempt n (1-based).
func (w *Worker) backoff(n int) time.Duration {
	base, ceiling := cmp.Or(w.BackoffBase, DefaultBackoffBase), cmp.Or(w.BackoffMax, DefaultBackoffMax)
	d := base
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// payload is the body of every delivery.
type payload struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      payloadData `json:"data"`
}

type payloadData struct {
	Seq     int64             `json:"seq"`
	Tenant  string            `json:"tenant"`
	Subject string            `json:"subject"`
	Data    map[string]string `json:"data"`
}

// messageID is the webhook-id of ev's deliveries: the same on every
// attempt, so that receivers can drop repeats.
func messageID(ev store.Event) string {
	if ev.Seq == 0 {
		return "evt_test_" + strconv.FormatInt(ev.CreatedAt.UnixNano(), 36)
	}
	return "evt_" + strconv.FormatInt(ev.Seq, 10)
}

// attempt sends ev to h, signed with each of secrets (h's, opened), once
// and logs the attempt. Its error is the store's, when the attempt could
// not be logged; the receiver's answer is in the result.
func (w *Worker) attempt(ctx context.Context, h store.Webhook, secrets []store.WebhookSecret, ev store.Event, n int) (Result, error) {
	w.init()
	d := Result{WebhookID: h.ID, EventSeq: ev.Seq, EventType: ev.Type, Attempt: n}
	started := time.Now()
	d.HTTPStatus, d.Error = w.post(ctx, h.URL, secrets, ev)
	d.Duration = time.Since(started)
	if len(d.Error) > maxErrorLen {
		d.Error = d.Error[:maxErrorLen]
	}
	logged, err := w.Store.InsertWebhookDelivery(context.WithoutCancel(ctx), d)
	if err != nil {
		return d, err
	}
	return logged, nil
}

// post sends one request to url, signed with each of secrets, and returns
// the receiver's status, and what went wrong when it was not a 2xx.
func (w *Worker) post(ctx context.Context, url string, secrets []store.WebhookSecret, ev store.Event) (int, string) {
	data := ev.Data
	if data == nil {
		data = map[string]string{}
	}
	body, err := json.Marshal(payload{
		Type: ev.Type, Timestamp: ev.CreatedAt.UTC(),
		Data: payloadData{Seq: ev.Seq, Tenant: ev.Tenant, Subject: ev.Subject, Data: data},
	})
	if err != nil {
		return 0, "encode the event: " + err.Error()
	}
	id, ts := messageID(ev), time.Now().Unix()
	sig, err := signAll(secrets, id, ts, body)
	if err != nil {
		return 0, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "build the request: " + redactError(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "better-compute-webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, sig)
	res, err := w.client.Do(req)
	if err != nil {
		// The error names the URL; it is logged and kept in the delivery log.
		return 0, redactError(err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)) // lets the connection be reused
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.StatusCode, "the receiver answered " + res.Status
	}
	return res.StatusCode, ""
}

// Test sends h a webhook.test event now, whatever its state, and logs and
// returns the attempt. It moves no cursor: the events after it wait as
// they were.
func (w *Worker) Test(ctx context.Context, h store.Webhook) (Result, error) {
	now, err := w.Store.Now(ctx)
	if err != nil {
		return Result{}, err
	}
	keys, err := w.keys(h, now)
	if err != nil {
		return Result{}, err
	}
	ev := store.Event{
		Kind: "webhook", Type: TestEventType, Tenant: h.Tenant, Subject: h.ID,
		Data: map[string]string{"url": h.URL}, CreatedAt: now,
	}
	return w.attempt(ctx, h, keys.at(now), ev, 1)
}
