package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// The journal is how bcd keeps "at most once" across reconnects, restarts
// and crashes (DESIGN.md §2.6). A command id is written ("started") and
// fsynced before the command runs and again ("finished", with its result)
// after; the result stays until the gateway's ResultAck, and the id after
// that, in a bounded tail, so a resent command is recognized. An id found
// "started" when the journal opens belonged to a process that died while
// running it: it becomes UNKNOWN and is never run again.
//
// Layout (bbolt): bucket "meta" holds the format version, the spec
// generation and the spec the node holds (a NodeSpec); bucket "commands" maps id -> entry; bucket "order" maps a
// sequence number (8 bytes, big-endian) -> id, oldest first, for the tail.
// An entry is [state][seq: 8 bytes][status][CommandResult, while unacked].

var (
	bucketMeta     = []byte("meta")
	bucketCommands = []byte("commands")
	bucketOrder    = []byte("order")
	keyVersion     = []byte("version")
	keySpecGen     = []byte("spec_generation")
	keySpec        = []byte("spec")
)

const (
	journalVersion = 1
	// keepAcked bounds the tail of acknowledged ids kept for dedup: more
	// than a gateway can have in flight for one node, small enough that the
	// Hello listing them stays a few tens of KiB.
	keepAcked = 1000
	// lockTimeout bounds the wait for bbolt's file lock: a second bcd on the
	// same data dir fails at once rather than hanging.
	lockTimeout = time.Second
)

// Entry states.
const (
	stateStarted  byte = 1
	stateFinished byte = 2 // result kept until acknowledged
	stateAcked    byte = 3 // id (and status) kept for dedup only
)

// unknownResult is what a command found "started" at open becomes.
const unknownResult = "bcd stopped while this command ran; it may or may not have taken effect, and it will not be run again"

// errJournalCorrupt marks a journal that cannot be trusted.
var errJournalCorrupt = errors.New("journal corrupt")

// journal is the node's bbolt journal. Its methods are safe for concurrent
// use (bbolt serializes writers).
type journal struct {
	db   *bolt.DB
	path string
}

// journalEntry is one command id's record.
type journalEntry struct {
	state  byte
	seq    uint64
	status agentv1.CommandStatus
	result *agentv1.CommandResult // only in stateFinished
}

func (e journalEntry) encode() ([]byte, error) {
	b := make([]byte, 10, 10+proto.Size(e.result))
	b[0] = e.state
	binary.BigEndian.PutUint64(b[1:9], e.seq)
	b[9] = byte(e.status)
	if e.state != stateFinished {
		return b, nil
	}
	return proto.MarshalOptions{}.MarshalAppend(b, e.result)
}

func decodeEntry(b []byte) (journalEntry, error) {
	if len(b) < 10 || b[0] < stateStarted || b[0] > stateAcked {
		return journalEntry{}, fmt.Errorf("%w: malformed entry", errJournalCorrupt)
	}
	e := journalEntry{state: b[0], seq: binary.BigEndian.Uint64(b[1:9]), status: agentv1.CommandStatus(b[9])}
	if e.state == stateFinished {
		e.result = &agentv1.CommandResult{}
		if err := proto.Unmarshal(b[10:], e.result); err != nil {
			return journalEntry{}, fmt.Errorf("%w: malformed result: %v", errJournalCorrupt, err)
		}
	}
	return e, nil
}

// openJournal opens dir/journal.db. A missing journal is created; one that
// bbolt cannot open as a database, or whose content breaks the layout, is
// moved aside to journal.db.corrupt-<time> and replaced. Either way fresh
// is true: the node cannot tell which commands it ran, and says so in its
// Hello. A lock held by another process, or a permission problem, is an
// error, never "corrupt": moving a live journal aside would lose it.
func openJournal(dir string, now time.Time) (j *journal, fresh bool, movedAside string, err error) {
	path := filepath.Join(dir, journalFile)
	fi, statErr := os.Stat(path)
	fresh = errors.Is(statErr, fs.ErrNotExist) || (statErr == nil && fi.Size() == 0)
	j, err = tryOpenJournal(path, fresh)
	if err == nil || !errors.Is(err, errJournalCorrupt) {
		return j, fresh, "", err
	}
	movedAside = path + ".corrupt-" + now.UTC().Format("20060102T150405.000Z")
	if rerr := os.Rename(path, movedAside); rerr != nil {
		return nil, false, "", fmt.Errorf("move the corrupt journal aside (%v): %w", err, rerr)
	}
	j, err = tryOpenJournal(path, true)
	return j, true, movedAside, err
}

// tryOpenJournal opens and checks one file. bbolt can panic on a damaged
// page; a panic here, in this goroutine, means corrupt.
func tryOpenJournal(path string, fresh bool) (j *journal, err error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, PageSize: 1024})
	if err != nil {
		switch {
		case errors.Is(err, bolterrors.ErrTimeout):
			return nil, fmt.Errorf("open the journal %s: it is locked; is another bcd node running on this data dir?", path)
		case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum),
			errors.Is(err, bolterrors.ErrVersionMismatch), errors.Is(err, bolterrors.ErrInvalidMapping):
			return nil, fmt.Errorf("open the journal %s: %w: %v", path, errJournalCorrupt, err)
		case isOSError(err):
			// The file system refused (permissions, I/O): the journal may
			// be fine, and moving it aside would lose it.
			return nil, fmt.Errorf("open the journal %s: %w", path, err)
		default:
			// Format errors bbolt does not name, such as a short file.
			return nil, fmt.Errorf("open the journal %s: %w: %v", path, errJournalCorrupt, err)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("open the journal %s: %w: %v", path, errJournalCorrupt, r)
		}
		if err != nil {
			_ = db.Close()
			j = nil
		}
	}()
	if err := db.Update(func(tx *bolt.Tx) error { return prepareJournal(tx, fresh) }); err != nil {
		return nil, fmt.Errorf("open the journal %s: %w", path, err)
	}
	return &journal{db: db, path: path}, nil
}

// prepareJournal creates the layout in a fresh journal; in an existing one
// it checks every invariant (each order key names an entry with that seq,
// and the reverse) and turns "started" entries into UNKNOWN results.
func prepareJournal(tx *bolt.Tx, fresh bool) error {
	if fresh {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketCommands); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketOrder); err != nil {
			return err
		}
		return meta.Put(keyVersion, []byte{journalVersion})
	}
	meta, cmds, order := tx.Bucket(bucketMeta), tx.Bucket(bucketCommands), tx.Bucket(bucketOrder)
	if meta == nil || cmds == nil || order == nil {
		return fmt.Errorf("%w: a bucket is missing", errJournalCorrupt)
	}
	if v := meta.Get(keyVersion); !bytes.Equal(v, []byte{journalVersion}) {
		return fmt.Errorf("%w: format version %v, want %d", errJournalCorrupt, v, journalVersion)
	}
	if g := meta.Get(keySpecGen); g != nil && len(g) != 8 {
		return fmt.Errorf("%w: malformed spec generation", errJournalCorrupt)
	}
	var started [][]byte
	n := 0
	err := cmds.ForEach(func(id, v []byte) error {
		e, err := decodeEntry(v)
		if err != nil {
			return err
		}
		if got := order.Get(seqKey(e.seq)); !bytes.Equal(got, id) {
			return fmt.Errorf("%w: entry %q is not in the order", errJournalCorrupt, id)
		}
		if e.state == stateStarted {
			started = append(started, bytes.Clone(id))
		}
		n++
		return nil
	})
	if err != nil {
		return err
	}
	if k := order.Stats().KeyN; k != n {
		return fmt.Errorf("%w: %d ordered ids for %d entries", errJournalCorrupt, k, n)
	}
	for _, id := range started {
		e, _ := decodeEntry(cmds.Get(id))
		e.state, e.status = stateFinished, agentv1.CommandStatus_COMMAND_STATUS_UNKNOWN
		e.result = &agentv1.CommandResult{Id: string(id), Status: e.status, Error: unknownResult}
		v, err := e.encode()
		if err != nil {
			return err
		}
		if err := cmds.Put(id, v); err != nil {
			return err
		}
	}
	return nil
}

// isOSError reports whether err came from the operating system rather
// than from reading a damaged file.
func isOSError(err error) bool {
	var pe *fs.PathError
	var errno syscall.Errno
	return errors.As(err, &pe) || errors.As(err, &errno)
}

func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// close closes the journal.
func (j *journal) close() error { return j.db.Close() }

// specGeneration is the spec generation the node holds.
func (j *journal) specGeneration() (gen int64, err error) {
	err = j.db.View(func(tx *bolt.Tx) error {
		if g := tx.Bucket(bucketMeta).Get(keySpecGen); len(g) == 8 {
			gen = int64(binary.BigEndian.Uint64(g))
		}
		return nil
	})
	return gen, err
}

// spec is the spec the node holds: an empty one of generation 0 before
// the first.
func (j *journal) spec() (*agentv1.NodeSpec, error) {
	spec := &agentv1.NodeSpec{}
	err := j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		if raw := b.Get(keySpec); raw != nil {
			if err := proto.Unmarshal(raw, spec); err != nil {
				return fmt.Errorf("%w: malformed spec: %v", errJournalCorrupt, err)
			}
		}
		if g := b.Get(keySpecGen); len(g) == 8 {
			spec.Generation = int64(binary.BigEndian.Uint64(g))
		}
		return nil
	})
	return spec, err
}

// setSpec records the spec the node now holds, with its generation, in
// one transaction.
func (j *journal) setSpec(spec *agentv1.NodeSpec) error {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode the spec: %w", err)
	}
	return j.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		if err := b.Put(keySpec, raw); err != nil {
			return err
		}
		return b.Put(keySpecGen, binary.BigEndian.AppendUint64(nil, uint64(spec.GetGeneration())))
	})
}

// lookup returns id's entry, if the journal has it.
func (j *journal) lookup(id string) (e journalEntry, ok bool, err error) {
	err = j.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketCommands).Get([]byte(id))
		if v == nil {
			return nil
		}
		ok = true
		e, err = decodeEntry(v)
		return err
	})
	return e, ok, err
}

// errAlreadyJournaled means start found the id: the command must not run.
var errAlreadyJournaled = errors.New("command id already in the journal")

// start records that id is about to run, durably, unless the journal
// already has it (errAlreadyJournaled).
func (j *journal) start(id string) error {
	return j.add(id, journalEntry{state: stateStarted})
}

// record stores a command that ends without running (an expired one) as
// finished in one step.
func (j *journal) record(res *agentv1.CommandResult) error {
	return j.add(res.GetId(), journalEntry{state: stateFinished, status: res.GetStatus(), result: res})
}

func (j *journal) add(id string, e journalEntry) error {
	if id == "" {
		return errors.New("journal: empty command id")
	}
	return j.db.Update(func(tx *bolt.Tx) error {
		cmds, order := tx.Bucket(bucketCommands), tx.Bucket(bucketOrder)
		if cmds.Get([]byte(id)) != nil {
			return errAlreadyJournaled
		}
		seq, err := order.NextSequence()
		if err != nil {
			return err
		}
		e.seq = seq
		v, err := e.encode()
		if err != nil {
			return err
		}
		if err := order.Put(seqKey(seq), []byte(id)); err != nil {
			return err
		}
		return cmds.Put([]byte(id), v)
	})
}

// finish records a started command's result, kept until acknowledged.
func (j *journal) finish(res *agentv1.CommandResult) error {
	return j.db.Update(func(tx *bolt.Tx) error {
		cmds := tx.Bucket(bucketCommands)
		e, err := decodeEntry(cmds.Get([]byte(res.GetId())))
		if err != nil {
			return fmt.Errorf("finish %s: %w", res.GetId(), err)
		}
		e.state, e.status, e.result = stateFinished, res.GetStatus(), res
		v, err := e.encode()
		if err != nil {
			return err
		}
		return cmds.Put([]byte(res.GetId()), v)
	})
}

// ack forgets id's result (the gateway stored it), keeps the id for dedup,
// and trims the oldest acknowledged ids beyond keepAcked. Unacknowledged
// entries are never trimmed. An unknown or unfinished id is ignored: a
// gateway acking twice must not disturb anything.
func (j *journal) ack(id string) error {
	return j.db.Update(func(tx *bolt.Tx) error {
		cmds, order := tx.Bucket(bucketCommands), tx.Bucket(bucketOrder)
		v := cmds.Get([]byte(id))
		if v == nil {
			return nil
		}
		e, err := decodeEntry(v)
		if err != nil || e.state != stateFinished {
			return err
		}
		e.state, e.result = stateAcked, nil
		if v, err = e.encode(); err != nil {
			return err
		}
		if err := cmds.Put([]byte(id), v); err != nil {
			return err
		}
		return trim(cmds, order)
	})
}

// trim deletes the oldest acknowledged entries while more than keepAcked
// ids are kept. Entries still waiting for an ack are skipped, whatever
// their age.
func trim(cmds, order *bolt.Bucket) error {
	excess := order.Stats().KeyN - keepAcked
	if excess <= 0 {
		return nil
	}
	var drop [][2][]byte // seq key, id
	c := order.Cursor()
	for k, id := c.First(); k != nil && len(drop) < excess; k, id = c.Next() {
		if v := cmds.Get(id); v != nil && v[0] == stateAcked {
			drop = append(drop, [2][]byte{bytes.Clone(k), bytes.Clone(id)})
		}
	}
	for _, d := range drop {
		if err := order.Delete(d[0]); err != nil {
			return err
		}
		if err := cmds.Delete(d[1]); err != nil {
			return err
		}
	}
	return nil
}

// unacked returns the results not yet acknowledged, oldest first: the node
// resends them at the start of every session.
func (j *journal) unacked() ([]*agentv1.CommandResult, error) {
	var out []*agentv1.CommandResult
	err := j.db.View(func(tx *bolt.Tx) error {
		cmds := tx.Bucket(bucketCommands)
		c := tx.Bucket(bucketOrder).Cursor()
		for k, id := c.First(); k != nil; k, id = c.Next() {
			v := cmds.Get(id)
			if len(v) == 0 || v[0] != stateFinished {
				continue
			}
			e, err := decodeEntry(v)
			if err != nil {
				return err
			}
			out = append(out, e.result)
		}
		return nil
	})
	return out, err
}

// recentIDs lists every id the journal holds, oldest first, for Hello.
func (j *journal) recentIDs() ([]string, error) {
	var out []string
	err := j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketOrder).ForEach(func(_, id []byte) error {
			out = append(out, string(id))
			return nil
		})
	})
	return out, err
}

// journalStats is the journal's size, for bcd status.
type journalStats struct {
	Entries int   `json:"entries"`
	Unacked int   `json:"unacked"`
	Bytes   int64 `json:"bytes"`
}

func (j *journal) stats() (s journalStats, err error) {
	err = j.db.View(func(tx *bolt.Tx) error {
		s.Bytes = tx.Size()
		return tx.Bucket(bucketCommands).ForEach(func(_, v []byte) error {
			s.Entries++
			if len(v) > 0 && v[0] != stateAcked {
				s.Unacked++
			}
			return nil
		})
	})
	return s, err
}
