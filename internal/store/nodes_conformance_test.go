package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestNodeConformance runs every NodeQuerier method on both engines: CAs,
// join tokens and their atomic spending, the node lifecycle and heartbeats,
// inventory, the command queue, and the cascades and restrictions between
// them and tenants.
func TestNodeConformance(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			run  func(ctx context.Context, t *testing.T, s *store.Store)
		}{
			{"CAs", exerciseCAs},
			{"JoinTokens", exerciseJoinTokens},
			{"SpendJoinToken", exerciseSpendJoinToken},
			{"SpendJoinTokenRace", exerciseSpendJoinTokenRace},
			{"Nodes", exerciseNodes},
			{"NodeSyncStates", exerciseNodeSyncStates},
			{"Sessions", exerciseSessions},
			{"Heartbeats", exerciseHeartbeats},
			{"TouchNodesRace", exerciseTouchNodesRace},
			{"ConditionsAndInventory", exerciseConditionsAndInventory},
			{"DeleteNodeCascades", exerciseDeleteNodeCascades},
			{"DeleteTenantWithNodes", exerciseDeleteTenantWithNodes},
			{"Commands", exerciseCommands},
			{"CommandResults", exerciseCommandResults},
			{"ExpireAndFailCommands", exerciseExpireAndFailCommands},
			{"NodesInTx", exerciseNodesInTx},
			{"Labels", exerciseNodeLabels},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s, ctx := setup(t, engine)
				tc.run(ctx, t, s)
			})
		}
	})
}

func exerciseCAs(ctx context.Context, t *testing.T, s *store.Store) {
	before := must(s.Now(ctx))(t)
	want := store.CA{Name: "root", CertDER: []byte("cert"), KeyEncrypted: []byte("sealed key")}
	got := must(s.CreateCA(ctx, want))(t)
	checkStamped(t, "CreateCA", before, must(s.Now(ctx))(t), got.CreatedAt, got.CreatedAt)
	want.CreatedAt = got.CreatedAt
	if !caEqual(got, want) {
		t.Errorf("CreateCA = %+v, want %+v", got, want)
	}
	if got := must(s.GetCA(ctx, "root"))(t); !caEqual(got, want) {
		t.Errorf("GetCA = %+v, want %+v", got, want)
	}
	// Two servers starting together: the loser gets ErrConflict, then reads
	// the winner's.
	_, err := s.CreateCA(ctx, store.CA{Name: "root", CertDER: []byte("other"), KeyEncrypted: []byte("other")})
	wantIs(t, "CreateCA(taken)", err, store.ErrConflict)
	if got := must(s.GetCA(ctx, "root"))(t); !caEqual(got, want) {
		t.Errorf("GetCA after the conflict = %+v, want the first %+v", got, want)
	}
	_, err = s.GetCA(ctx, "node")
	wantIs(t, "GetCA(missing)", err, store.ErrNotFound)
}

func caEqual(a, b store.CA) bool {
	return a.Name == b.Name && bytes.Equal(a.CertDER, b.CertDER) &&
		bytes.Equal(a.KeyEncrypted, b.KeyEncrypted) && a.CreatedAt.Equal(b.CreatedAt)
}

// newJoinToken returns a join token record for tenant with maxUses uses,
// expiring ttl from the store's clock, to the microsecond both engines keep.
func newJoinToken(ctx context.Context, t *testing.T, q store.Querier, id, tenant string, maxUses int, ttl time.Duration) store.JoinToken {
	t.Helper()
	return store.JoinToken{
		ID: id, Tenant: tenant, SecretHash: []byte("hash of " + id), MaxUses: maxUses,
		Description: "join token " + id,
		ExpiresAt:   must(q.Now(ctx))(t).Add(ttl).Truncate(time.Microsecond),
	}
}

func joinTokensEqual(a, b store.JoinToken) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.Pool == b.Pool && bytes.Equal(a.SecretHash, b.SecretHash) &&
		a.MaxUses == b.MaxUses && a.Uses == b.Uses && maps.Equal(a.Labels, b.Labels) &&
		a.Description == b.Description && a.CreatedAt.Equal(b.CreatedAt) &&
		a.ExpiresAt.Equal(b.ExpiresAt) && a.RevokedAt.Equal(b.RevokedAt)
}

func seedTenants(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	for _, name := range []string{"acme", "globex"} {
		must(q.CreateTenant(ctx, store.Tenant{Name: name}))(t)
	}
}

func exerciseJoinTokens(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	before := must(s.Now(ctx))(t)
	want := newJoinToken(ctx, t, s, "j1", "acme", 5, time.Hour)
	want.Pool = "gpu"
	want.Labels = map[string]string{"rack": "r1", "zone": "a"}
	j1 := must(s.CreateJoinToken(ctx, want))(t)
	checkStamped(t, "CreateJoinToken", before, must(s.Now(ctx))(t), j1.CreatedAt, j1.CreatedAt)
	want.CreatedAt = j1.CreatedAt
	if !joinTokensEqual(j1, want) || !j1.RevokedAt.IsZero() {
		t.Errorf("CreateJoinToken = %+v, want %+v", j1, want)
	}
	if got := must(s.GetJoinToken(ctx, "j1"))(t); !joinTokensEqual(got, j1) {
		t.Errorf("GetJoinToken = %+v, want %+v", got, j1)
	}
	// A new token has not been spent, whatever the caller said; no labels
	// are nil.
	spent := newJoinToken(ctx, t, s, "j2", "acme", 1, time.Hour)
	spent.Uses = 1
	time.Sleep(2 * time.Millisecond) // SQLite's clock ticks in milliseconds
	if got := must(s.CreateJoinToken(ctx, spent))(t); got.Uses != 0 || got.Labels != nil {
		t.Errorf("CreateJoinToken(Uses 1, no labels) = %+v, want Uses 0 and nil labels", got)
	}
	must(s.CreateJoinToken(ctx, newJoinToken(ctx, t, s, "g1", "globex", 1, time.Hour)))(t)

	for _, tc := range []struct {
		name string
		tok  store.JoinToken
		want error
	}{
		{"taken id", newJoinToken(ctx, t, s, "j1", "globex", 1, time.Hour), store.ErrConflict},
		{"missing tenant", newJoinToken(ctx, t, s, "x1", "initech", 1, time.Hour), store.ErrNotFound},
	} {
		_, err := s.CreateJoinToken(ctx, tc.tok)
		wantIs(t, "CreateJoinToken("+tc.name+")", err, tc.want)
	}
	_, err := s.GetJoinToken(ctx, "missing")
	wantIs(t, "GetJoinToken(missing)", err, store.ErrNotFound)

	for tenant, want := range map[string]string{"acme": "[j2 j1]", "globex": "[g1]", "initech": "[]"} {
		var ids []string
		for _, j := range must(s.ListJoinTokens(ctx, tenant))(t) {
			ids = append(ids, j.ID)
		}
		if fmt.Sprint(ids) != want {
			t.Errorf("ListJoinTokens(%s) = %v, want %s", tenant, ids, want)
		}
	}

	revoked := must(s.RevokeJoinToken(ctx, "j1"))(t)
	if revoked.RevokedAt.Before(j1.CreatedAt) || revoked.RevokedAt.Location() != time.UTC {
		t.Errorf("RevokeJoinToken = %+v, want RevokedAt in UTC after %v", revoked, j1.CreatedAt)
	}
	time.Sleep(2 * time.Millisecond)
	if again := must(s.RevokeJoinToken(ctx, "j1"))(t); !again.RevokedAt.Equal(revoked.RevokedAt) {
		t.Errorf("RevokeJoinToken again: RevokedAt = %v, want the first revocation's %v", again.RevokedAt, revoked.RevokedAt)
	}
	_, err = s.RevokeJoinToken(ctx, "missing")
	wantIs(t, "RevokeJoinToken(missing)", err, store.ErrNotFound)
}

func exerciseSpendJoinToken(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	must(s.CreateJoinToken(ctx, newJoinToken(ctx, t, s, "two", "acme", 2, time.Hour)))(t)
	for want := 1; want <= 2; want++ {
		if got := must(s.SpendJoinToken(ctx, "two"))(t); got.Uses != want || got.MaxUses != 2 {
			t.Errorf("SpendJoinToken #%d = %+v, want Uses %d of 2", want, got, want)
		}
	}
	_, err := s.SpendJoinToken(ctx, "two")
	wantIs(t, "SpendJoinToken(used up)", err, store.ErrConflict)
	if got := must(s.GetJoinToken(ctx, "two"))(t); got.Uses != 2 {
		t.Errorf("after a refused spend Uses = %d, want 2", got.Uses)
	}

	// Expiry is by the store's clock: one expired before it was created, one
	// that expires between two spends.
	must(s.CreateJoinToken(ctx, newJoinToken(ctx, t, s, "expired", "acme", 5, -time.Second)))(t)
	_, err = s.SpendJoinToken(ctx, "expired")
	wantIs(t, "SpendJoinToken(expired)", err, store.ErrConflict)
	must(s.CreateJoinToken(ctx, newJoinToken(ctx, t, s, "brief", "acme", 5, 200*time.Millisecond)))(t)
	must(s.SpendJoinToken(ctx, "brief"))(t)
	time.Sleep(250 * time.Millisecond)
	_, err = s.SpendJoinToken(ctx, "brief")
	wantIs(t, "SpendJoinToken(expired since)", err, store.ErrConflict)

	must(s.CreateJoinToken(ctx, newJoinToken(ctx, t, s, "revoked", "acme", 5, time.Hour)))(t)
	must(s.RevokeJoinToken(ctx, "revoked"))(t)
	_, err = s.SpendJoinToken(ctx, "revoked")
	wantIs(t, "SpendJoinToken(revoked)", err, store.ErrConflict)

	_, err = s.SpendJoinToken(ctx, "missing")
	wantIs(t, "SpendJoinToken(missing)", err, store.ErrNotFound)
	if errors.Is(err, store.ErrConflict) {
		t.Errorf("SpendJoinToken(missing) = %v, want ErrNotFound only", err)
	}
}

// exerciseSpendJoinTokenRace spends a one-use token from 16 goroutines at
// once: exactly one join gets it.
func exerciseSpendJoinTokenRace(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	must(s.CreateJoinToken(ctx, newJoinToken(ctx, t, s, "once", "acme", 1, time.Hour)))(t)
	const joins = 16
	errs := make([]error, joins)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range joins {
		wg.Go(func() {
			<-start
			_, errs[i] = s.SpendJoinToken(ctx, "once")
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("SpendJoinToken (racing) = %v, want nil or ErrConflict", err)
		}
	}
	if won != 1 {
		t.Errorf("%d of %d racing SpendJoinToken calls succeeded, want exactly 1", won, joins)
	}
	if got := must(s.GetJoinToken(ctx, "once"))(t); got.Uses != 1 {
		t.Errorf("after the race Uses = %d, want 1", got.Uses)
	}
}

// newNode returns a node record for tenant, as the join service writes it,
// its certificate good for a day of the store's clock.
func newNode(ctx context.Context, t *testing.T, q store.Querier, id, tenant string) store.Node {
	t.Helper()
	return store.Node{
		ID: id, Tenant: tenant, Hostname: id + ".example", MachineID: "machine-" + id,
		Labels: map[string]string{"node": id}, BcdVersion: "v1.0.0",
		CertSerial: "serial-" + id, CertPublicKey: []byte("key of " + id),
		CertNotAfter: must(q.Now(ctx))(t).Add(24 * time.Hour).Truncate(time.Microsecond),
	}
}

// createNodes creates the nodes ids in tenant.
func createNodes(ctx context.Context, t *testing.T, q store.Querier, tenant string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		must(q.CreateNode(ctx, newNode(ctx, t, q, id, tenant)))(t)
	}
}

func nodesEqual(a, b store.Node) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.Pool == b.Pool && a.Hostname == b.Hostname &&
		a.MachineID == b.MachineID && a.State == b.State && maps.Equal(a.Labels, b.Labels) &&
		maps.Equal(a.InventoryLabels, b.InventoryLabels) &&
		a.BcdVersion == b.BcdVersion && a.CertSerial == b.CertSerial &&
		bytes.Equal(a.CertPublicKey, b.CertPublicKey) && a.CertNotAfter.Equal(b.CertNotAfter) &&
		a.SessionEpoch == b.SessionEpoch && a.BootID == b.BootID && a.SpecGeneration == b.SpecGeneration &&
		bytes.Equal(a.Conditions, b.Conditions) && a.LastSeenAt.Equal(b.LastSeenAt) &&
		a.CreatedAt.Equal(b.CreatedAt) && a.RevokedAt.Equal(b.RevokedAt)
}

func nodeIDs(ns []store.Node) []string {
	var ids []string
	for _, n := range ns {
		ids = append(ids, n.ID)
	}
	return ids
}

func exerciseNodes(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	before := must(s.Now(ctx))(t)
	want := newNode(ctx, t, s, "n1", "acme")
	want.Pool = "gpu"
	n1 := must(s.CreateNode(ctx, want))(t)
	checkStamped(t, "CreateNode", before, must(s.Now(ctx))(t), n1.CreatedAt, n1.CreatedAt)
	want.CreatedAt, want.State = n1.CreatedAt, store.NodeJoined
	if !nodesEqual(n1, want) || n1.SessionEpoch != 0 || !n1.LastSeenAt.IsZero() || n1.Conditions != nil {
		t.Errorf("CreateNode = %+v, want %+v", n1, want)
	}
	if got := must(s.GetNode(ctx, "n1"))(t); !nodesEqual(got, n1) {
		t.Errorf("GetNode = %+v, want %+v", got, n1)
	}
	createNodes(ctx, t, s, "acme", "n3", "n2")
	createNodes(ctx, t, s, "globex", "g1")

	for _, tc := range []struct {
		name string
		node store.Node
		want error
	}{
		{"taken id", newNode(ctx, t, s, "n1", "globex"), store.ErrConflict},
		{"missing tenant", newNode(ctx, t, s, "x1", "initech"), store.ErrNotFound},
	} {
		_, err := s.CreateNode(ctx, tc.node)
		wantIs(t, "CreateNode("+tc.name+")", err, tc.want)
	}
	_, err := s.GetNode(ctx, "missing")
	wantIs(t, "GetNode(missing)", err, store.ErrNotFound)

	for tenant, want := range map[string]string{"acme": "[n1 n2 n3]", "globex": "[g1]", "": "[g1 n1 n2 n3]", "initech": "[]"} {
		if got := nodeIDs(must(s.ListNodes(ctx, tenant))(t)); fmt.Sprint(got) != want {
			t.Errorf("ListNodes(%q) = %v, want %s", tenant, got, want)
		}
	}

	notAfter := n1.CertNotAfter.Add(time.Hour)
	renewed := must(s.RenewNodeCert(ctx, "n1", "serial-2", []byte("key 2"), notAfter))(t)
	want = n1
	want.CertSerial, want.CertPublicKey, want.CertNotAfter = "serial-2", []byte("key 2"), notAfter
	if !nodesEqual(renewed, want) {
		t.Errorf("RenewNodeCert = %+v, want %+v", renewed, want)
	}
	_, err = s.RenewNodeCert(ctx, "missing", "s", []byte("k"), notAfter)
	wantIs(t, "RenewNodeCert(missing)", err, store.ErrNotFound)

	revoked := must(s.RevokeNode(ctx, "n2"))(t)
	if revoked.State != store.NodeRevoked || revoked.RevokedAt.Before(revoked.CreatedAt) || revoked.RevokedAt.Location() != time.UTC {
		t.Errorf("RevokeNode = %+v, want revoked, RevokedAt in UTC", revoked)
	}
	time.Sleep(2 * time.Millisecond) // SQLite's clock ticks in milliseconds
	if again := must(s.RevokeNode(ctx, "n2"))(t); !again.RevokedAt.Equal(revoked.RevokedAt) {
		t.Errorf("RevokeNode again: RevokedAt = %v, want the first revocation's %v", again.RevokedAt, revoked.RevokedAt)
	}
	_, err = s.RevokeNode(ctx, "missing")
	wantIs(t, "RevokeNode(missing)", err, store.ErrNotFound)
	_, err = s.RenewNodeCert(ctx, "n2", "s", []byte("k"), notAfter)
	wantIs(t, "RenewNodeCert(revoked)", err, store.ErrNotFound)

	if err := s.DeleteNode(ctx, "n3"); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	_, err = s.GetNode(ctx, "n3")
	wantIs(t, "GetNode(deleted)", err, store.ErrNotFound)
	wantIs(t, "DeleteNode(missing)", s.DeleteNode(ctx, "n3"), store.ErrNotFound)
}

func exerciseSessions(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1", "n2")
	var last store.Node
	for epoch := int64(1); epoch <= 3; epoch++ {
		before := must(s.Now(ctx))(t)
		bcd, boot := fmt.Sprintf("v1.%d", epoch), fmt.Sprintf("boot-%d", epoch)
		got := must(s.BeginSession(ctx, "n1", bcd, boot))(t)
		if got.SessionEpoch != epoch || got.State != store.NodeReady || got.BcdVersion != bcd || got.BootID != boot ||
			got.LastSeenAt.Before(before) || got.LastSeenAt.Location() != time.UTC {
			t.Errorf("BeginSession #%d = %+v, want epoch %d, ready, %s, %s, seen after %v", epoch, got, epoch, bcd, boot, before)
		}
		last = got
	}
	if got := must(s.GetNode(ctx, "n1"))(t); !nodesEqual(got, last) {
		t.Errorf("GetNode after BeginSession = %+v, want %+v", got, last)
	}
	if got := must(s.GetNode(ctx, "n2"))(t); got.SessionEpoch != 0 || got.State != store.NodeJoined {
		t.Errorf("GetNode(n2) = %+v, want untouched by n1's sessions", got)
	}

	must(s.RevokeNode(ctx, "n1"))(t)
	_, err := s.BeginSession(ctx, "n1", "v2", "boot")
	wantIs(t, "BeginSession(revoked)", err, store.ErrNotFound)
	if got := must(s.GetNode(ctx, "n1"))(t); got.SessionEpoch != 3 || got.State != store.NodeRevoked {
		t.Errorf("GetNode after a refused BeginSession = %+v, want epoch 3, revoked", got)
	}
	_, err = s.BeginSession(ctx, "missing", "v2", "boot")
	wantIs(t, "BeginSession(missing)", err, store.ErrNotFound)
}

func exerciseHeartbeats(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "a", "b", "c", "joined", "revoked")
	createNodes(ctx, t, s, "globex", "g")
	for _, id := range []string{"a", "b", "c", "g", "revoked"} {
		must(s.BeginSession(ctx, id, "v1", "boot"))(t)
	}
	must(s.RevokeNode(ctx, "revoked"))(t)
	cutoff := must(s.Now(ctx))(t).Add(time.Microsecond)
	time.Sleep(2 * time.Millisecond) // SQLite's clock ticks in milliseconds
	if got := must(s.TouchNodes(ctx, []string{"c", "g"}))(t); len(got) != 0 {
		t.Errorf("TouchNodes(ready nodes) = %v, want none woken", got)
	}

	// a and b were last seen before the cutoff, c and g after it; joined
	// and revoked nodes are never marked.
	if got := must(s.MarkUnreachable(ctx, cutoff))(t); fmt.Sprint(got) != "[a b]" {
		t.Errorf("MarkUnreachable = %v, want [a b]", got)
	}
	if got := must(s.MarkUnreachable(ctx, cutoff))(t); len(got) != 0 {
		t.Errorf("MarkUnreachable again = %v, want none", got)
	}
	if got := must(s.GetNode(ctx, "a"))(t); got.State != store.NodeUnreachable {
		t.Errorf("GetNode(a) = %+v, want unreachable", got)
	}

	// Only the formerly unreachable node in the batch wakes; every existing
	// node in it is stamped, a missing one ignored.
	before := must(s.Now(ctx))(t)
	ids := []string{"joined", "c", "a", "missing", "revoked"}
	if got := must(s.TouchNodes(ctx, ids))(t); fmt.Sprint(got) != "[a]" {
		t.Errorf("TouchNodes(%v) = %v, want [a]", ids, got)
	}
	for id, state := range map[string]store.NodeState{
		"a": store.NodeReady, "b": store.NodeUnreachable, "c": store.NodeReady,
		"joined": store.NodeJoined, "revoked": store.NodeRevoked,
	} {
		got := must(s.GetNode(ctx, id))(t)
		if got.State != state {
			t.Errorf("after TouchNodes GetNode(%s).State = %s, want %s", id, got.State, state)
		}
		if stamped := !got.LastSeenAt.Before(before); stamped != (id != "b") {
			t.Errorf("after TouchNodes GetNode(%s).LastSeenAt = %v, stamped at or after %v: %v, want %v",
				id, got.LastSeenAt, before, stamped, id != "b")
		}
	}
	if got, err := s.TouchNodes(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("TouchNodes(nil) = %v, %v; want none", got, err)
	}
}

// exerciseTouchNodesRace touches the same unreachable nodes from several
// goroutines at once: each node is reported woken by exactly one call.
func exerciseTouchNodesRace(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("n%02d", i)
		ids = append(ids, id)
		createNodes(ctx, t, s, "acme", id)
		must(s.BeginSession(ctx, id, "v1", "boot"))(t)
	}
	time.Sleep(2 * time.Millisecond) // SQLite's clock ticks in milliseconds
	if got := must(s.MarkUnreachable(ctx, must(s.Now(ctx))(t)))(t); len(got) != len(ids) {
		t.Fatalf("MarkUnreachable = %v, want all %d nodes", got, len(ids))
	}
	const batches = 8
	woken := make([][]string, batches)
	var wg sync.WaitGroup
	for i := range batches {
		wg.Go(func() {
			// Each batch in its own order: the store must not deadlock.
			batch := slices.Clone(ids)
			if i%2 == 1 {
				slices.Reverse(batch)
			}
			var err error
			if woken[i], err = s.TouchNodes(ctx, batch); err != nil {
				t.Errorf("TouchNodes (racing): %v", err)
			}
		})
	}
	wg.Wait()
	all := slices.Concat(woken...)
	slices.Sort(all)
	if fmt.Sprint(all) != fmt.Sprint(ids) {
		t.Errorf("racing TouchNodes woke %v between them, want each of %v exactly once", all, ids)
	}
}

func exerciseConditionsAndInventory(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1", "n2")

	conditions := []byte(`[{"type":"Ready","status":"True"}]`)
	if err := s.SetNodeConditions(ctx, "n1", conditions); err != nil {
		t.Fatalf("SetNodeConditions: %v", err)
	}
	if got := must(s.GetNode(ctx, "n1"))(t); !bytes.Equal(got.Conditions, conditions) {
		t.Errorf("GetNode after SetNodeConditions: Conditions = %q, want %q", got.Conditions, conditions)
	}
	if err := s.SetNodeConditions(ctx, "n1", nil); err != nil {
		t.Fatalf("SetNodeConditions(nil): %v", err)
	}
	if got := must(s.GetNode(ctx, "n1"))(t); got.Conditions != nil {
		t.Errorf("GetNode after SetNodeConditions(nil): Conditions = %q, want nil", got.Conditions)
	}
	wantIs(t, "SetNodeConditions(missing)", s.SetNodeConditions(ctx, "missing", conditions), store.ErrNotFound)

	before := must(s.Now(ctx))(t)
	for _, sec := range []store.InventorySection{
		{NodeID: "n1", Name: "gpus", Hash: []byte("h-gpus"), Content: []byte("gpus v1")},
		{NodeID: "n1", Name: "cpu", Hash: []byte("h-cpu"), Content: []byte("cpu v1")},
		{NodeID: "n2", Name: "host", Hash: []byte("h-host"), Content: []byte("host v1")},
	} {
		if err := s.PutInventorySection(ctx, sec); err != nil {
			t.Fatalf("PutInventorySection(%s/%s): %v", sec.NodeID, sec.Name, err)
		}
	}
	secs := must(s.ListInventorySections(ctx, "n1"))(t)
	if got := inventoryString(secs); got != "[cpu:h-cpu:cpu v1 gpus:h-gpus:gpus v1]" {
		t.Errorf("ListInventorySections(n1) = %s", got)
	}
	for _, sec := range secs {
		checkStamped(t, "PutInventorySection", before, must(s.Now(ctx))(t), sec.UpdatedAt, sec.UpdatedAt)
	}
	time.Sleep(2 * time.Millisecond) // SQLite's clock ticks in milliseconds
	replace := store.InventorySection{NodeID: "n1", Name: "gpus", Hash: []byte("h-gpus-2"), Content: []byte("gpus v2")}
	if err := s.PutInventorySection(ctx, replace); err != nil {
		t.Fatalf("PutInventorySection(replace): %v", err)
	}
	secs = must(s.ListInventorySections(ctx, "n1"))(t)
	if got := inventoryString(secs); got != "[cpu:h-cpu:cpu v1 gpus:h-gpus-2:gpus v2]" {
		t.Errorf("ListInventorySections(n1) after replace = %s", got)
	}
	if len(secs) == 2 && !secs[1].UpdatedAt.After(secs[0].UpdatedAt) {
		t.Errorf("replaced section UpdatedAt = %v, want after the other's %v", secs[1].UpdatedAt, secs[0].UpdatedAt)
	}
	if got := inventoryString(must(s.ListInventorySections(ctx, "n2"))(t)); got != "[host:h-host:host v1]" {
		t.Errorf("ListInventorySections(n2) = %s", got)
	}
	if got := must(s.ListInventorySections(ctx, "missing"))(t); len(got) != 0 {
		t.Errorf("ListInventorySections(missing) = %v, want none", got)
	}
	err := s.PutInventorySection(ctx, store.InventorySection{NodeID: "missing", Name: "cpu", Hash: []byte("h")})
	wantIs(t, "PutInventorySection(missing node)", err, store.ErrNotFound)
}

// inventoryString is sections as name:hash:content, in order.
func inventoryString(secs []store.InventorySection) string {
	var out []string
	for _, sec := range secs {
		out = append(out, sec.Name+":"+string(sec.Hash)+":"+string(sec.Content))
	}
	return fmt.Sprint(out)
}

func exerciseDeleteNodeCascades(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1", "n2")
	for _, id := range []string{"n1", "n2"} {
		sec := store.InventorySection{NodeID: id, Name: "cpu", Hash: []byte("h"), Content: []byte("c")}
		if err := s.PutInventorySection(ctx, sec); err != nil {
			t.Fatalf("PutInventorySection: %v", err)
		}
		must(s.CreateNodeCommand(ctx, newCommand(ctx, t, s, "cmd-"+id, id, time.Hour)))(t)
	}
	if err := s.DeleteNode(ctx, "n1"); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if got := must(s.ListInventorySections(ctx, "n1"))(t); len(got) != 0 {
		t.Errorf("ListInventorySections after DeleteNode = %v, want none", got)
	}
	_, err := s.GetNodeCommand(ctx, "cmd-n1")
	wantIs(t, "GetNodeCommand(deleted node's)", err, store.ErrNotFound)
	if got := must(s.ListNodeCommands(ctx, "n1", 10))(t); len(got) != 0 {
		t.Errorf("ListNodeCommands after DeleteNode = %v, want none", got)
	}
	// The other node keeps its own.
	if got := must(s.ListInventorySections(ctx, "n2"))(t); len(got) != 1 {
		t.Errorf("ListInventorySections(n2) = %v, want its section", got)
	}
	must(s.GetNodeCommand(ctx, "cmd-n2"))(t)
}

// exerciseDeleteTenantWithNodes: a tenant with nodes cannot be deleted; once
// they are gone it can, taking its join tokens with it.
func exerciseDeleteTenantWithNodes(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1")
	must(s.CreateJoinToken(ctx, newJoinToken(ctx, t, s, "j1", "acme", 1, time.Hour)))(t)
	wantIs(t, "DeleteTenant(with nodes)", s.DeleteTenant(ctx, "acme"), store.ErrConflict)
	must(s.GetTenant(ctx, "acme"))(t)
	must(s.GetJoinToken(ctx, "j1"))(t)
	must(s.GetNode(ctx, "n1"))(t)

	if err := s.DeleteNode(ctx, "n1"); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if err := s.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatalf("DeleteTenant(without nodes): %v", err)
	}
	_, err := s.GetJoinToken(ctx, "j1")
	wantIs(t, "GetJoinToken(deleted tenant's)", err, store.ErrNotFound)
	wantIs(t, "DeleteTenant(missing)", s.DeleteTenant(ctx, "acme"), store.ErrNotFound)
}

// exerciseNodesInTx joins a node in one transaction, as the join service
// does: spend the token, create the node, begin its session, touch it.
func exerciseNodesInTx(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	must(s.CreateJoinToken(ctx, newJoinToken(ctx, t, s, "j1", "acme", 1, time.Hour)))(t)
	err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
		tok, err := q.SpendJoinToken(ctx, "j1")
		if err != nil {
			return err
		}
		n := newNode(ctx, t, q, "n1", tok.Tenant)
		if _, err := q.CreateNode(ctx, n); err != nil {
			return err
		}
		if _, err := q.BeginSession(ctx, "n1", "v1", "boot"); err != nil {
			return err
		}
		_, err = q.TouchNodes(ctx, []string{"n1"})
		return err
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if got := must(s.GetNode(ctx, "n1"))(t); got.State != store.NodeReady || got.SessionEpoch != 1 {
		t.Errorf("after commit GetNode = %+v, want ready on epoch 1", got)
	}

	// A second join with the spent token fails inside the transaction and
	// leaves nothing behind.
	err = s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := q.CreateNode(ctx, newNode(ctx, t, q, "n2", "acme")); err != nil {
			return err
		}
		_, err := q.SpendJoinToken(ctx, "j1")
		return err
	})
	wantIs(t, "InTx(spent token)", err, store.ErrConflict)
	_, err = s.GetNode(ctx, "n2")
	wantIs(t, "GetNode(n2) after the rolled back join", err, store.ErrNotFound)
}

// exerciseNodeSyncStates: each existing node of the ids asked, with its
// state and spec generation; a missing one is left out.
func exerciseNodeSyncStates(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1", "n2", "n3")
	must(s.RevokeNode(ctx, "n2"))(t)
	got := must(s.NodeSyncStates(ctx, []string{"n1", "n2", "gone"}))(t)
	slices.SortFunc(got, func(a, b store.NodeSync) int { return strings.Compare(a.ID, b.ID) })
	n1 := must(s.GetNode(ctx, "n1"))(t)
	want := []store.NodeSync{
		{ID: "n1", State: n1.State, SpecGeneration: n1.SpecGeneration},
		{ID: "n2", State: store.NodeRevoked, SpecGeneration: must(s.GetNode(ctx, "n2"))(t).SpecGeneration},
	}
	if !slices.Equal(got, want) {
		t.Errorf("NodeSyncStates = %+v, want %+v", got, want)
	}
	if got := must(s.NodeSyncStates(ctx, nil))(t); len(got) != 0 {
		t.Errorf("NodeSyncStates(none) = %+v", got)
	}
}

// exerciseNodeLabels: the operator's labels and the inventory's are kept
// apart; setting one leaves the other as it was.
func exerciseNodeLabels(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1")
	inv := map[string]string{"gpu.model": "h100-sxm", "gpu.count": "8"}
	must(struct{}{}, s.SetNodeInventoryLabels(ctx, "n1", inv))(t)
	n := must(s.SetNodeLabels(ctx, "n1", map[string]string{"rack": "r7"}))(t)
	if !maps.Equal(n.Labels, map[string]string{"rack": "r7"}) || !maps.Equal(n.InventoryLabels, inv) {
		t.Errorf("SetNodeLabels = labels %v, inventory labels %v", n.Labels, n.InventoryLabels)
	}
	must(struct{}{}, s.SetNodeInventoryLabels(ctx, "n1", map[string]string{"gpu.count": "7"}))(t)
	got := must(s.GetNode(ctx, "n1"))(t)
	if !maps.Equal(got.Labels, map[string]string{"rack": "r7"}) || !maps.Equal(got.InventoryLabels, map[string]string{"gpu.count": "7"}) {
		t.Errorf("GetNode = labels %v, inventory labels %v", got.Labels, got.InventoryLabels)
	}
	if n := must(s.SetNodeLabels(ctx, "n1", nil))(t); len(n.Labels) != 0 {
		t.Errorf("SetNodeLabels(nil) left %v", n.Labels)
	}
	_, err := s.SetNodeLabels(ctx, "nope", nil)
	wantIs(t, "SetNodeLabels(missing)", err, store.ErrNotFound)
	wantIs(t, "SetNodeInventoryLabels(missing)", s.SetNodeInventoryLabels(ctx, "nope", nil), store.ErrNotFound)
}
