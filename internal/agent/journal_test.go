package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

func openTestJournal(t *testing.T, dir string) (*journal, bool) {
	t.Helper()
	j, fresh, _, err := openJournal(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return j, fresh
}

func succeeded(id, out string) *agentv1.CommandResult {
	return &agentv1.CommandResult{Id: id, Status: agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, Output: out}
}

func TestJournalDedupAcrossReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, fresh := openTestJournal(t, dir)
	if !fresh {
		t.Error("a new journal is not fresh")
	}
	if fi, _ := os.Stat(filepath.Join(dir, journalFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("journal mode %v, want 0600", fi.Mode().Perm())
	}
	if err := j.start("c1"); err != nil {
		t.Fatal(err)
	}
	if err := j.finish(succeeded("c1", "done")); err != nil {
		t.Fatal(err)
	}
	spec := &agentv1.NodeSpec{Generation: 7, Allocations: []*agentv1.Allocation{{ReservationId: "r-1", GpuUuids: []string{"GPU-a"}}}}
	if err := j.setSpec(spec); err != nil {
		t.Fatal(err)
	}
	j.close()

	j, fresh = openTestJournal(t, dir)
	defer j.close()
	if fresh {
		t.Error("a reopened journal is fresh")
	}
	if err := j.start("c1"); !errors.Is(err, errAlreadyJournaled) {
		t.Errorf("start of a journaled id: %v", err)
	}
	e, ok, err := j.lookup("c1")
	if err != nil || !ok || e.state != stateFinished || e.result.GetOutput() != "done" {
		t.Errorf("lookup = %+v, %v, %v", e, ok, err)
	}
	if g, _ := j.specGeneration(); g != 7 {
		t.Errorf("spec generation %d, want 7", g)
	}
	if got, err := j.spec(); err != nil || !proto.Equal(got, spec) {
		t.Errorf("spec = %v, %v; want %v", got, err, spec)
	}
	un, _ := j.unacked()
	if len(un) != 1 || un[0].GetId() != "c1" {
		t.Errorf("unacked = %v", un)
	}
	if err := j.ack("c1"); err != nil {
		t.Fatal(err)
	}
	if un, _ := j.unacked(); len(un) != 0 {
		t.Errorf("unacked after ack = %v", un)
	}
	e, ok, _ = j.lookup("c1")
	if !ok || e.state != stateAcked || e.result != nil {
		t.Errorf("after ack: %+v", e)
	}
	if err := j.ack("c1"); err != nil { // a second ack changes nothing
		t.Error(err)
	}
	if err := j.ack("never-seen"); err != nil {
		t.Error(err)
	}
}

// A crash between "started" and "finished" leaves an id the next start
// reports UNKNOWN and never runs.
func TestJournalCrashMidCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, _ := openTestJournal(t, dir)
	if err := j.start("c1"); err != nil {
		t.Fatal(err)
	}
	j.close() // the process dies here

	j, fresh := openTestJournal(t, dir)
	defer j.close()
	if fresh {
		t.Error("the journal survived; it is not fresh")
	}
	un, err := j.unacked()
	if err != nil || len(un) != 1 {
		t.Fatalf("unacked = %v, %v", un, err)
	}
	if un[0].GetStatus() != agentv1.CommandStatus_COMMAND_STATUS_UNKNOWN || !strings.Contains(un[0].GetError(), "will not be run again") {
		t.Errorf("result = %v", un[0])
	}
	if err := j.start("c1"); !errors.Is(err, errAlreadyJournaled) {
		t.Errorf("start: %v", err)
	}
}

func TestJournalCorrupt(t *testing.T) {
	t.Parallel()
	tests := map[string]func(t *testing.T, path string){
		"garbage": func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("not a bolt database ", 1000)), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"truncated": func(t *testing.T, path string) {
			j, _ := openTestJournal(t, filepath.Dir(path))
			j.close()
			if err := os.Truncate(path, 100); err != nil {
				t.Fatal(err)
			}
		},
		"invariant broken": func(t *testing.T, path string) {
			j, _ := openTestJournal(t, filepath.Dir(path))
			_ = j.start("c1")
			// An entry without its place in the order.
			_ = j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketOrder).Delete(seqKey(1)) })
			j.close()
		},
	}
	for name, damage := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, journalFile)
			damage(t, path)
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			j, fresh, moved, err := openJournal(dir, now)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer j.close()
			if !fresh || moved != path+".corrupt-20260102T030405.000Z" {
				t.Errorf("fresh %v, moved to %q", fresh, moved)
			}
			if _, err := os.Stat(moved); err != nil {
				t.Errorf("the corrupt journal was not kept: %v", err)
			}
			if ids, _ := j.recentIDs(); len(ids) != 0 {
				t.Errorf("the fresh journal holds %v", ids)
			}
			if err := j.start("c1"); err != nil {
				t.Errorf("the fresh journal does not work: %v", err)
			}
		})
	}
}

// A journal locked by another process is an error, never "corrupt".
func TestJournalLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, _ := openTestJournal(t, dir)
	defer j.close()
	_, _, moved, err := openJournal(dir, time.Now())
	if err == nil || !strings.Contains(err.Error(), "another bcd node") || moved != "" {
		t.Errorf("second open: %v, moved %q", err, moved)
	}
}

func TestJournalTrim(t *testing.T) {
	t.Parallel()
	j, _ := openTestJournal(t, t.TempDir())
	defer j.close()
	j.db.NoSync = true // two thousand commits; durability is not under test
	// An old unacknowledged result survives any amount of trimming.
	if err := j.record(succeeded("keep", "")); err != nil {
		t.Fatal(err)
	}
	const total = keepAcked + 50
	for i := range total {
		id := fmt.Sprintf("c%04d", i)
		if err := j.record(succeeded(id, "")); err != nil {
			t.Fatal(err)
		}
		if err := j.ack(id); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := j.recentIDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != keepAcked {
		t.Errorf("%d ids kept, want %d", len(ids), keepAcked)
	}
	if !slices.Contains(ids, "keep") {
		t.Error("an unacknowledged result was trimmed")
	}
	if slices.Contains(ids, "c0000") || !slices.Contains(ids, fmt.Sprintf("c%04d", total-1)) {
		t.Error("trimmed the wrong end")
	}
	if ids[len(ids)-1] != fmt.Sprintf("c%04d", total-1) {
		t.Errorf("ids not oldest first: last %s", ids[len(ids)-1])
	}
	st, err := j.stats()
	if err != nil || st.Entries != keepAcked || st.Unacked != 1 || st.Bytes == 0 {
		t.Errorf("stats = %+v, %v", st, err)
	}
}
