package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// The nodes half of sqliteQuerier (NodeQuerier). The schema is
// sqlite/migrations/0003_nodes.sql.

// sqliteForeignKey reports whether err is a failed foreign key: on a
// delete, a row that others still refer to without a cascade. SQLite runs an
// ON DELETE RESTRICT action as an internal trigger, so it reports that one
// as SQLITE_CONSTRAINT_TRIGGER (the schema has no trigger that raises).
func sqliteForeignKey(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY, sqlite3.SQLITE_CONSTRAINT_TRIGGER:
		return true
	}
	return false
}

func sqliteCA(r sqlitedb.PkiCa) CA {
	return CA{Name: r.Name, CertDER: r.CertDer, KeyEncrypted: r.KeyEncrypted, CreatedAt: fromMicros(r.CreatedAt)}
}

func sqliteJoinToken(r sqlitedb.JoinToken) (JoinToken, error) {
	labels, err := decodeStrings([]byte(r.Labels))
	if err != nil {
		return JoinToken{}, fmt.Errorf("join token %q: labels: %w", r.ID, err)
	}
	return JoinToken{
		ID: r.ID, Tenant: r.Tenant, Pool: r.Pool, SecretHash: r.SecretHash,
		MaxUses: int(r.MaxUses), Uses: int(r.Uses), Labels: labels, Description: r.Description,
		CreatedAt: fromMicros(r.CreatedAt), ExpiresAt: fromMicros(r.ExpiresAt), RevokedAt: fromNullMicros(r.RevokedAt),
	}, nil
}

func sqliteNode(r sqlitedb.Node) (Node, error) {
	labels, err := decodeStrings([]byte(r.Labels))
	if err != nil {
		return Node{}, fmt.Errorf("node %q: labels: %w", r.ID, err)
	}
	invLabels, err := decodeStrings([]byte(r.InventoryLabels))
	if err != nil {
		return Node{}, fmt.Errorf("node %q: inventory labels: %w", r.ID, err)
	}
	return Node{
		ID: r.ID, Tenant: r.Tenant, Pool: r.Pool, Cordoned: r.Cordoned != 0, Hostname: r.Hostname, MachineID: r.MachineID,
		State: NodeState(r.State), Labels: labels, InventoryLabels: invLabels, BcdVersion: r.BcdVersion,
		CertSerial: r.CertSerial, CertPublicKey: r.CertPublicKey, CertNotAfter: fromMicros(r.CertNotAfter),
		SessionEpoch: r.SessionEpoch, BootID: r.BootID, SpecGeneration: r.SpecGeneration,
		Conditions: nilIfEmpty(r.Conditions), LastSeenAt: fromNullMicros(r.LastSeenAt),
		CreatedAt: fromMicros(r.CreatedAt), RevokedAt: fromNullMicros(r.RevokedAt),
	}, nil
}

func sqliteInventorySection(r sqlitedb.NodeInventory) InventorySection {
	return InventorySection{
		NodeID: r.NodeID, Name: r.Name, Hash: r.Hash, Content: nilIfEmpty(r.Content),
		UpdatedAt: fromMicros(r.UpdatedAt),
	}
}

func sqliteNodeCommand(r sqlitedb.NodeCommand) (NodeCommand, error) {
	args, err := decodeStrings([]byte(r.Args))
	if err != nil {
		return NodeCommand{}, fmt.Errorf("node command %q: args: %w", r.ID, err)
	}
	return NodeCommand{
		ID: r.ID, NodeID: r.NodeID, Kind: r.Kind, Args: args, IdempotencyKey: r.IdempotencyKey,
		State: CommandState(r.State), Output: r.Output, Error: r.Error, SessionEpoch: r.SessionEpoch,
		CreatedAt: fromMicros(r.CreatedAt), Deadline: fromMicros(r.Deadline),
		SentAt: fromNullMicros(r.SentAt), FinishedAt: fromNullMicros(r.FinishedAt),
	}, nil
}

func (s sqliteQuerier) CreateCA(ctx context.Context, ca CA) (CA, error) {
	r, err := s.q.CreateCA(ctx, sqlitedb.CreateCAParams{Name: ca.Name, CertDer: ca.CertDER, KeyEncrypted: ca.KeyEncrypted})
	if err != nil {
		return CA{}, fmt.Errorf("store: create CA %q: %w", ca.Name, sqliteClassify(err))
	}
	return sqliteCA(r), nil
}

func (s sqliteQuerier) GetCA(ctx context.Context, name string) (CA, error) {
	r, err := s.q.GetCA(ctx, name)
	if err != nil {
		return CA{}, fmt.Errorf("store: get CA %q: %w", name, sqliteClassify(err))
	}
	return sqliteCA(r), nil
}

func (s sqliteQuerier) CreateJoinToken(ctx context.Context, t JoinToken) (JoinToken, error) {
	r, err := s.q.CreateJoinToken(ctx, sqlitedb.CreateJoinTokenParams{
		ID: t.ID, Tenant: t.Tenant, Pool: t.Pool, SecretHash: t.SecretHash, MaxUses: int64(t.MaxUses),
		Labels: string(encodeStrings(t.Labels)), Description: t.Description, ExpiresAt: t.ExpiresAt.UnixMicro(),
	})
	var out JoinToken
	if err == nil {
		out, err = sqliteJoinToken(r)
	}
	if err != nil {
		return JoinToken{}, fmt.Errorf("store: create join token %q in %q: %w", t.ID, t.Tenant, sqliteClassify(err))
	}
	return out, nil
}

func (s sqliteQuerier) GetJoinToken(ctx context.Context, id string) (JoinToken, error) {
	r, err := s.q.GetJoinToken(ctx, id)
	var out JoinToken
	if err == nil {
		out, err = sqliteJoinToken(r)
	}
	if err != nil {
		return JoinToken{}, fmt.Errorf("store: get join token %q: %w", id, sqliteClassify(err))
	}
	return out, nil
}

func (s sqliteQuerier) ListJoinTokens(ctx context.Context, tenant string) ([]JoinToken, error) {
	rows, err := s.q.ListJoinTokens(ctx, tenant)
	var out []JoinToken
	if err == nil {
		out, err = convertRowsErr(rows, sqliteJoinToken)
	}
	if err != nil {
		return nil, fmt.Errorf("store: list join tokens of %q: %w", tenant, err)
	}
	return out, nil
}

func (s sqliteQuerier) RevokeJoinToken(ctx context.Context, id string) (JoinToken, error) {
	r, err := s.q.RevokeJoinToken(ctx, id)
	var out JoinToken
	if err == nil {
		out, err = sqliteJoinToken(r)
	}
	if err != nil {
		return JoinToken{}, fmt.Errorf("store: revoke join token %q: %w", id, sqliteClassify(err))
	}
	return out, nil
}

// SpendJoinToken spends in one statement; only when it changed nothing does
// a second read tell a missing token from one that cannot be spent.
func (s sqliteQuerier) SpendJoinToken(ctx context.Context, id string) (JoinToken, error) {
	r, err := s.q.SpendJoinToken(ctx, id)
	if err == nil {
		var out JoinToken
		if out, err = sqliteJoinToken(r); err == nil {
			return out, nil
		}
	}
	if err = sqliteClassify(err); errors.Is(err, ErrNotFound) {
		if _, err = s.q.GetJoinToken(ctx, id); err == nil {
			err = fmt.Errorf("revoked, expired or used up: %w", ErrConflict)
		} else {
			err = sqliteClassify(err)
		}
	}
	return JoinToken{}, fmt.Errorf("store: spend join token %q: %w", id, err)
}

func (s sqliteQuerier) CreateNode(ctx context.Context, n Node) (Node, error) {
	r, err := s.q.CreateNode(ctx, sqlitedb.CreateNodeParams{
		ID: n.ID, Tenant: n.Tenant, Pool: n.Pool, Hostname: n.Hostname, MachineID: n.MachineID,
		Labels: string(encodeStrings(n.Labels)), BcdVersion: n.BcdVersion,
		CertSerial: n.CertSerial, CertPublicKey: n.CertPublicKey, CertNotAfter: n.CertNotAfter.UnixMicro(),
		SpecGeneration: n.SpecGeneration,
	})
	return sqliteNodeResult(r, err, "create node %q in %q", n.ID, n.Tenant)
}

// sqliteNodeResult converts the row of a query that returns one node, or
// wraps its error with what was being done.
func sqliteNodeResult(r sqlitedb.Node, err error, what string, args ...any) (Node, error) {
	var out Node
	if err == nil {
		out, err = sqliteNode(r)
	}
	if err != nil {
		return Node{}, fmt.Errorf("store: "+what+": %w", append(args, sqliteClassify(err))...)
	}
	return out, nil
}

func (s sqliteQuerier) GetNode(ctx context.Context, id string) (Node, error) {
	r, err := s.q.GetNode(ctx, id)
	return sqliteNodeResult(r, err, "get node %q", id)
}

func (s sqliteQuerier) ListNodes(ctx context.Context, tenant string) ([]Node, error) {
	var rows []sqlitedb.Node
	var err error
	if tenant == "" {
		rows, err = s.q.ListAllNodes(ctx)
	} else {
		rows, err = s.q.ListTenantNodes(ctx, tenant)
	}
	var out []Node
	if err == nil {
		out, err = convertRowsErr(rows, sqliteNode)
	}
	if err != nil {
		return nil, fmt.Errorf("store: list nodes of %q: %w", tenant, err)
	}
	return out, nil
}

func (s sqliteQuerier) RenewNodeCert(ctx context.Context, id, serial string, publicKey []byte, notAfter time.Time) (Node, error) {
	r, err := s.q.RenewNodeCert(ctx, sqlitedb.RenewNodeCertParams{
		ID: id, CertSerial: serial, CertPublicKey: publicKey, CertNotAfter: notAfter.UnixMicro(),
	})
	return sqliteNodeResult(r, err, "renew certificate of node %q", id)
}

func (s sqliteQuerier) RevokeNode(ctx context.Context, id string) (Node, error) {
	r, err := s.q.RevokeNode(ctx, id)
	return sqliteNodeResult(r, err, "revoke node %q", id)
}

func (s sqliteQuerier) NodeSyncStates(ctx context.Context, ids []string) ([]NodeSync, error) {
	rows, err := s.q.NodeSyncStates(ctx, jsonStrings(ids))
	if err != nil {
		return nil, fmt.Errorf("store: read the sync states of %d nodes: %w", len(ids), err)
	}
	out := make([]NodeSync, len(rows))
	for i, r := range rows {
		out[i] = NodeSync{ID: r.ID, State: NodeState(r.State), SpecGeneration: r.SpecGeneration}
	}
	return out, nil
}

func (s sqliteQuerier) DeleteNode(ctx context.Context, id string) error {
	n, err := s.q.DeleteNode(ctx, id)
	return sqliteAffected(n, err, "delete node %q", id)
}

func (s sqliteQuerier) BeginSession(ctx context.Context, id, bcdVersion, bootID string) (Node, error) {
	r, err := s.q.BeginSession(ctx, sqlitedb.BeginSessionParams{ID: id, BcdVersion: bcdVersion, BootID: bootID})
	return sqliteNodeResult(r, err, "begin session of node %q", id)
}

// TouchNodes runs two statements, each for the whole batch, because
// SQLite's RETURNING cannot see a row's previous state: TouchNodes stamps the
// listed nodes that are not unreachable, then WakeNodes stamps the
// unreachable ones, sets them ready and returns their ids. Each statement is
// atomic and, in this order, the ids returned are exactly the nodes this
// call set ready, even outside a transaction (see the queries); inside InTx
// the two are one write.
func (s sqliteQuerier) TouchNodes(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	list := jsonStrings(ids)
	if _, err := s.q.TouchNodes(ctx, list); err != nil {
		return nil, fmt.Errorf("store: touch %d nodes: %w", len(ids), err)
	}
	woke, err := s.q.WakeNodes(ctx, list)
	if err != nil {
		return nil, fmt.Errorf("store: touch %d nodes: %w", len(ids), err)
	}
	slices.Sort(woke)
	return woke, nil
}

func (s sqliteQuerier) MarkUnreachable(ctx context.Context, cutoff time.Time) ([]string, error) {
	ids, err := s.q.MarkUnreachable(ctx, cutoff.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("store: mark nodes unreachable: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}

func (s sqliteQuerier) SetNodeConditions(ctx context.Context, id string, conditions []byte) error {
	if conditions == nil {
		conditions = []byte{} // NOT NULL: empty, not NULL
	}
	n, err := s.q.SetNodeConditions(ctx, sqlitedb.SetNodeConditionsParams{ID: id, Conditions: conditions})
	return sqliteAffected(n, err, "set conditions of node %q", id)
}

func (s sqliteQuerier) PutInventorySection(ctx context.Context, sec InventorySection) error {
	content := sec.Content
	if content == nil {
		content = []byte{} // NOT NULL: empty, not NULL
	}
	err := s.q.PutInventorySection(ctx, sqlitedb.PutInventorySectionParams{
		NodeID: sec.NodeID, Name: sec.Name, Hash: sec.Hash, Content: content,
	})
	if err != nil {
		return fmt.Errorf("store: put inventory section %q of node %q: %w", sec.Name, sec.NodeID, sqliteClassify(err))
	}
	return nil
}

func (s sqliteQuerier) ListInventorySections(ctx context.Context, nodeID string) ([]InventorySection, error) {
	rows, err := s.q.ListInventorySections(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("store: list inventory of node %q: %w", nodeID, err)
	}
	return convertRows(rows, sqliteInventorySection), nil
}

func (s sqliteQuerier) CreateNodeCommand(ctx context.Context, c NodeCommand) (NodeCommand, error) {
	r, err := s.q.CreateNodeCommand(ctx, sqlitedb.CreateNodeCommandParams{
		ID: c.ID, NodeID: c.NodeID, Kind: c.Kind, Args: string(encodeStrings(c.Args)),
		IdempotencyKey: c.IdempotencyKey, Deadline: c.Deadline.UnixMicro(),
	})
	return sqliteCommandResult(r, err, "create command %q for node %q", c.ID, c.NodeID)
}

// sqliteCommandResult converts the row of a query that returns one command,
// or wraps its error with what was being done.
func sqliteCommandResult(r sqlitedb.NodeCommand, err error, what string, args ...any) (NodeCommand, error) {
	var out NodeCommand
	if err == nil {
		out, err = sqliteNodeCommand(r)
	}
	if err != nil {
		return NodeCommand{}, fmt.Errorf("store: "+what+": %w", append(args, sqliteClassify(err))...)
	}
	return out, nil
}

// sqliteCommands converts the rows of a query that returns commands, or
// wraps its error with what was being done.
func sqliteCommands(rows []sqlitedb.NodeCommand, err error, what string, args ...any) ([]NodeCommand, error) {
	var out []NodeCommand
	if err == nil {
		out, err = convertRowsErr(rows, sqliteNodeCommand)
	}
	if err != nil {
		return nil, fmt.Errorf("store: "+what+": %w", append(args, err)...)
	}
	return out, nil
}

func (s sqliteQuerier) GetNodeCommand(ctx context.Context, id string) (NodeCommand, error) {
	r, err := s.q.GetNodeCommand(ctx, id)
	return sqliteCommandResult(r, err, "get command %q", id)
}

func (s sqliteQuerier) GetNodeCommandByKey(ctx context.Context, nodeID, key string) (NodeCommand, error) {
	r, err := s.q.GetNodeCommandByKey(ctx, sqlitedb.GetNodeCommandByKeyParams{NodeID: nodeID, IdempotencyKey: key})
	return sqliteCommandResult(r, err, "get command %q of node %q", key, nodeID)
}

func (s sqliteQuerier) ListNodeCommands(ctx context.Context, nodeID string, limit int) ([]NodeCommand, error) {
	if err := checkLimit("list commands of node "+nodeID, limit); err != nil {
		return nil, err
	}
	rows, err := s.q.ListNodeCommands(ctx, sqlitedb.ListNodeCommandsParams{NodeID: nodeID, Lim: int64(limit)})
	return sqliteCommands(rows, err, "list commands of node %q", nodeID)
}

func (s sqliteQuerier) PendingNodeCommands(ctx context.Context, nodeID string, epoch int64, limit int) ([]NodeCommand, error) {
	if err := checkLimit("list pending commands of node "+nodeID, limit); err != nil {
		return nil, err
	}
	rows, err := s.q.PendingNodeCommands(ctx, sqlitedb.PendingNodeCommandsParams{NodeID: nodeID, SessionEpoch: epoch, Lim: int64(limit)})
	return sqliteCommands(rows, err, "list pending commands of node %q", nodeID)
}

// commandUnchanged is the error of a command update that changed no
// row: ErrConflict when the command exists (it is no longer in a state the
// update accepts), ErrNotFound when it does not.
func (s sqliteQuerier) commandUnchanged(ctx context.Context, id string) error {
	if _, err := s.q.GetNodeCommand(ctx, id); err != nil {
		return sqliteClassify(err)
	}
	return ErrConflict
}

func (s sqliteQuerier) MarkCommandSent(ctx context.Context, id string, epoch int64) error {
	n, err := s.q.MarkCommandSent(ctx, sqlitedb.MarkCommandSentParams{ID: id, SessionEpoch: epoch})
	if err == nil && n == 0 {
		err = s.commandUnchanged(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("store: mark command %q sent on epoch %d: %w", id, epoch, err)
	}
	return nil
}

func (s sqliteQuerier) FinishCommand(ctx context.Context, id string, epoch int64, state CommandState, output, errText string) (NodeCommand, error) {
	if err := checkResult(id, state); err != nil {
		return NodeCommand{}, err
	}
	r, err := s.q.FinishCommand(ctx, sqlitedb.FinishCommandParams{
		ID: id, SessionEpoch: epoch, State: string(state), Output: output, Error: errText,
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = s.commandUnchanged(ctx, id)
	}
	return sqliteCommandResult(r, err, "finish command %q on epoch %d", id, epoch)
}

func (s sqliteQuerier) ExpireCommands(ctx context.Context, resultGrace time.Duration) ([]NodeCommand, error) {
	rows, err := s.q.ExpireCommands(ctx, resultGrace.Microseconds())
	out, err := sqliteCommands(rows, err, "expire commands")
	sortCommands(out)
	return out, err
}

func (s sqliteQuerier) NodesWithPendingCommands(ctx context.Context) ([]string, error) {
	ids, err := s.q.NodesWithPendingCommands(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list nodes with pending commands: %w", err)
	}
	return ids, nil
}

func (s sqliteQuerier) FailInFlightCommands(ctx context.Context, nodeID string) ([]NodeCommand, error) {
	rows, err := s.q.FailInFlightCommands(ctx, nodeID)
	out, err := sqliteCommands(rows, err, "fail in-flight commands of node %q", nodeID)
	sortCommands(out)
	return out, err
}

func (s sqliteQuerier) SetNodeLabels(ctx context.Context, id string, labels map[string]string) (Node, error) {
	r, err := s.q.SetNodeLabels(ctx, sqlitedb.SetNodeLabelsParams{ID: id, Labels: string(encodeStrings(labels))})
	return sqliteNodeResult(r, err, "set labels of node %q", id)
}

func (s sqliteQuerier) SetNodeInventoryLabels(ctx context.Context, id string, labels map[string]string) error {
	n, err := s.q.SetNodeInventoryLabels(ctx, sqlitedb.SetNodeInventoryLabelsParams{ID: id, InventoryLabels: string(encodeStrings(labels))})
	return sqliteAffected(n, err, "set inventory labels of node %q", id)
}
