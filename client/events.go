package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// streamPath is the server's event stream (server-sent events).
const streamPath = "/v1/events/stream"

// reconnectPause is how long WatchEvents waits before reopening a dropped
// stream, unless the server said otherwise.
const reconnectPause = 2 * time.Second

// ErrResync is what WatchEvents returns when the server says events were
// missed: they were pruned before the watch resumed, or the watch fell too
// far behind. Rebuild what you derive from events (list the objects), then
// watch again from now.
var ErrResync = errors.New("events were missed: rebuild your view and watch again from now")

// WatchOptions selects the events WatchEvents follows.
type WatchOptions struct {
	// After is the seq of the last event already seen; the watch starts
	// after it. Negative starts at the newest event.
	After int64
	// Tenant whose events to follow; empty for the caller's own.
	Tenant string
	// AllTenants follows every tenant's (the platform only).
	AllTenants bool
	// Types filters by type: "*", "reservation.*" or "reservation.bound".
	Types []string
}

// WatchEvents calls fn with each event the caller may read, in order and
// each once, until ctx ends (it then returns ctx's error), fn returns an
// error (returned as is), the server refuses the watch (its message), or
// the server asks for a resync (ErrResync). A dropped connection is
// reopened after a pause from the last event seen, so a server restart
// loses nothing.
func (c *Client) WatchEvents(ctx context.Context, o WatchOptions, fn func(*apiv1.Event) error) error {
	last := o.After
	for {
		pause, err := c.watchOnce(ctx, o, &last, fn)
		var fatal watchError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &fatal):
			return fatal.err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// watchError ends WatchEvents: anything else reconnects.
type watchError struct{ err error }

func (e watchError) Error() string { return e.err.Error() }

// watchOnce reads one connection of the stream, moving *last with every
// id the server sends, and returns how long to pause before reconnecting.
func (c *Client) watchOnce(ctx context.Context, o WatchOptions, last *int64, fn func(*apiv1.Event) error) (time.Duration, error) {
	q := url.Values{}
	if o.Tenant != "" {
		q.Set("tenant", o.Tenant)
	}
	if o.AllTenants {
		q.Set("all_tenants", "true")
	}
	if len(o.Types) > 0 {
		q.Set("types", strings.Join(o.Types, ","))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+streamPath+"?"+q.Encode(), nil)
	if err != nil {
		return 0, watchError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if *last >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	res, err := c.http.Do(req)
	if err != nil {
		return reconnectPause, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, watchError{streamRefusal(res)}
	}

	pause := reconnectPause
	var id, event, data string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		field, value, _ := strings.Cut(sc.Text(), ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "event":
			event = value
		case "data":
			data = value
		case "retry":
			if ms, err := strconv.Atoi(value); err == nil && ms > 0 {
				pause = time.Duration(ms) * time.Millisecond
			}
		case "": // a blank line ends a message; a comment keeps it alive
			if sc.Text() != "" {
				continue
			}
			if n, err := strconv.ParseInt(id, 10, 64); err == nil {
				*last = n
			}
			switch event {
			case "":
			case "resync":
				return 0, watchError{ErrResync}
			case "unauthorized":
				return 0, watchError{fmt.Errorf("the server ended the watch: %s", reason(data))}
			default:
				e, err := decodeStreamEvent(data)
				if err != nil {
					return 0, watchError{err}
				}
				if err := fn(e); err != nil {
					return 0, watchError{err}
				}
			}
			id, event, data = "", "", ""
		}
	}
	return pause, sc.Err()
}

// decodeStreamEvent reads an event's data line.
func decodeStreamEvent(data string) (*apiv1.Event, error) {
	var v struct {
		Seq     int64             `json:"seq"`
		Type    string            `json:"type"`
		Tenant  string            `json:"tenant"`
		Subject string            `json:"subject"`
		Time    time.Time         `json:"time"`
		Data    map[string]string `json:"data"`
	}
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		return nil, fmt.Errorf("the event stream sent an event that is not JSON: %w", err)
	}
	return &apiv1.Event{Seq: v.Seq, Type: v.Type, Tenant: v.Tenant, Subject: v.Subject, Data: v.Data, CreateTime: timestamppb.New(v.Time)}, nil
}

// streamRefusal is the server's reason for answering the stream with an
// error status: its Connect error message when it sent one.
func streamRefusal(res *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return fmt.Errorf("%s: %s", strings.ReplaceAll(e.Code, "_", " "), e.Message)
	}
	return fmt.Errorf("the event stream answered %s", res.Status)
}

// reason is the reason field of a JSON data line, or the line itself.
func reason(data string) string {
	var v struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal([]byte(data), &v) == nil && v.Reason != "" {
		return v.Reason
	}
	return data
}
