package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// TestEventsListWatch: events list shows what the CLI's own calls changed;
// events watch follows new events live as JSON lines, and with --after 0
// catches up on all the older ones first; interrupting it is a clean stop.
func TestEventsListWatch(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)
	admin.do(t, &apiv1.CreatePoolResponse{}, "pools", "create", "gpu")
	seedGPUNode(t, admin.storeURL, "n-gpu-1", "platform", "gpu", 4)

	// A live watch of reservation events from the newest event on (as
	// --after, so that it cannot miss what follows however slowly it
	// connects).
	before := &apiv1.ListEventsResponse{}
	admin.do(t, before, "events", "list", "--limit", "1000")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Execute(ctx, Env{Args: []string{"events", "watch", "--types", "reservation.*", "-o", "json", "--after", fmt.Sprint(before.GetNextAfterSeq())},
			Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return admin.vars[k] }})
	}()
	rc := &apiv1.CreateReservationResponse{}
	admin.do(t, rc, "reservations", "create", "--pool", "gpu", "--gpus", "2", "--duration", "1h")
	id := rc.GetReservation().GetId()
	admin.table(t, "reservations", "release", id)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "reservation.released") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("events watch ended with %v; an interrupt is a clean stop", err)
	}
	var types []string
	for line := range strings.Lines(out.String()) {
		var e struct {
			Seq     string `json:"seq"`
			Type    string `json:"type"`
			Subject string `json:"subject"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("watch -o json printed %q: %v", line, err)
		}
		if e.Subject != id {
			t.Errorf("watch printed an event of %s, want only %s's", e.Subject, id)
		}
		types = append(types, e.Type)
	}
	if strings.Join(types, ",") != "reservation.placed,reservation.released" {
		t.Errorf("watch printed %q, want placed then released", types)
	}

	// list: the node's and the reservation's events, in order.
	table := admin.table(t, "events", "list")
	for _, want := range []string{"SEQ", "node.joined", "node.ready", "reservation.placed", "reservation.released", "gpus=2"} {
		if !strings.Contains(table, want) {
			t.Errorf("events list lacks %q:\n%s", want, table)
		}
	}
	res := &apiv1.ListEventsResponse{}
	admin.do(t, res, "events", "list", "--types", "node.*", "--limit", "1")
	if len(res.GetEvents()) != 1 || res.GetEvents()[0].GetType() != "node.joined" || res.GetNextAfterSeq() != res.GetEvents()[0].GetSeq() {
		t.Errorf("events list --types node.* --limit 1 = %v", res)
	}

	// watch --after 0 replays from the start, then follows.
	ctx2, cancel2 := context.WithCancel(context.Background())
	var replay syncBuffer
	done2 := make(chan error, 1)
	go func() {
		done2 <- Execute(ctx2, Env{Args: []string{"events", "watch", "--after", "0"}, Stdout: &replay, Stderr: &errb,
			Getenv: func(k string) string { return admin.vars[k] }})
	}()
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(replay.String(), "reservation.released") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel2()
	<-done2
	if got := replay.String(); !strings.Contains(got, "node.joined") || !strings.Contains(got, "reservation.released") {
		t.Errorf("watch --after 0 printed:\n%s", got)
	}

	admin.fails(t, "--tenant and --all-tenants exclude each other", "events", "list", "--tenant", "acme", "--all-tenants")
	admin.fails(t, "is not an event type", "events", "list", "--types", "bogus")
	admin.fails(t, "is not an event type", "events", "watch", "--types", "bogus")
	admin.fails(t, "--after -1 is negative", "events", "list", "--after", "-1")
}
