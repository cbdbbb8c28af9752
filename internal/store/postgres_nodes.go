package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
)

// The nodes half of pgQuerier (NodeQuerier). The schema is
// postgres/migrations/0003_nodes.sql.

// pgNodesTenantFKey is the foreign key that keeps a tenant with nodes from
// being deleted; its violation on a tenant delete is ErrConflict.
const pgNodesTenantFKey = "nodes_tenant_fkey"

// pgTenantHasNodes reports whether err is a tenant delete refused because
// the tenant still has nodes.
func pgTenantHasNodes(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503" && pgErr.ConstraintName == pgNodesTenantFKey
}

func pgCA(r pgdb.PkiCa) CA {
	return CA{Name: r.Name, CertDER: r.CertDer, KeyEncrypted: r.KeyEncrypted, CreatedAt: r.CreatedAt.UTC()}
}

func pgJoinToken(r pgdb.JoinToken) (JoinToken, error) {
	labels, err := decodeStrings(r.Labels)
	if err != nil {
		return JoinToken{}, fmt.Errorf("join token %q: labels: %w", r.ID, err)
	}
	return JoinToken{
		ID: r.ID, Tenant: r.Tenant, Pool: r.Pool, SecretHash: r.SecretHash,
		MaxUses: int(r.MaxUses), Uses: int(r.Uses), Labels: labels, Description: r.Description,
		CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(), RevokedAt: fromNullTime(r.RevokedAt),
	}, nil
}

func pgNode(r pgdb.Node) (Node, error) {
	labels, err := decodeStrings(r.Labels)
	if err != nil {
		return Node{}, fmt.Errorf("node %q: labels: %w", r.ID, err)
	}
	invLabels, err := decodeStrings(r.InventoryLabels)
	if err != nil {
		return Node{}, fmt.Errorf("node %q: inventory labels: %w", r.ID, err)
	}
	return Node{
		ID: r.ID, Tenant: r.Tenant, Pool: r.Pool, Cordoned: r.Cordoned, Hostname: r.Hostname, MachineID: r.MachineID,
		State: NodeState(r.State), Labels: labels, InventoryLabels: invLabels, BcdVersion: r.BcdVersion,
		CertSerial: r.CertSerial, CertPublicKey: r.CertPublicKey, CertNotAfter: r.CertNotAfter.UTC(),
		SessionEpoch: r.SessionEpoch, BootID: r.BootID, SpecGeneration: r.SpecGeneration,
		Conditions: nilIfEmpty(r.Conditions), LastSeenAt: fromNullTime(r.LastSeenAt),
		CreatedAt: r.CreatedAt.UTC(), RevokedAt: fromNullTime(r.RevokedAt),
	}, nil
}

func pgInventorySection(r pgdb.NodeInventory) InventorySection {
	return InventorySection{
		NodeID: r.NodeID, Name: r.Name, Hash: r.Hash, Content: nilIfEmpty(r.Content),
		UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func pgNodeCommand(r pgdb.NodeCommand) (NodeCommand, error) {
	args, err := decodeStrings(r.Args)
	if err != nil {
		return NodeCommand{}, fmt.Errorf("node command %q: args: %w", r.ID, err)
	}
	return NodeCommand{
		ID: r.ID, NodeID: r.NodeID, Kind: r.Kind, Args: args, IdempotencyKey: r.IdempotencyKey,
		State: CommandState(r.State), Output: r.Output, Error: r.Error, SessionEpoch: r.SessionEpoch,
		CreatedAt: r.CreatedAt.UTC(), Deadline: r.Deadline.UTC(),
		SentAt: fromNullTime(r.SentAt), FinishedAt: fromNullTime(r.FinishedAt),
	}, nil
}

func (p pgQuerier) CreateCA(ctx context.Context, ca CA) (CA, error) {
	r, err := p.q.CreateCA(ctx, pgdb.CreateCAParams{Name: ca.Name, CertDer: ca.CertDER, KeyEncrypted: ca.KeyEncrypted})
	if err != nil {
		return CA{}, fmt.Errorf("store: create CA %q: %w", ca.Name, pgClassify(err))
	}
	return pgCA(r), nil
}

func (p pgQuerier) GetCA(ctx context.Context, name string) (CA, error) {
	r, err := p.q.GetCA(ctx, name)
	if err != nil {
		return CA{}, fmt.Errorf("store: get CA %q: %w", name, pgClassify(err))
	}
	return pgCA(r), nil
}

func (p pgQuerier) CreateJoinToken(ctx context.Context, t JoinToken) (JoinToken, error) {
	r, err := p.q.CreateJoinToken(ctx, pgdb.CreateJoinTokenParams{
		ID: t.ID, Tenant: t.Tenant, Pool: t.Pool, SecretHash: t.SecretHash, MaxUses: int64(t.MaxUses),
		Labels: encodeStrings(t.Labels), Description: t.Description, ExpiresAt: t.ExpiresAt,
	})
	var out JoinToken
	if err == nil {
		out, err = pgJoinToken(r)
	}
	if err != nil {
		return JoinToken{}, fmt.Errorf("store: create join token %q in %q: %w", t.ID, t.Tenant, pgClassify(err))
	}
	return out, nil
}

func (p pgQuerier) GetJoinToken(ctx context.Context, id string) (JoinToken, error) {
	r, err := p.q.GetJoinToken(ctx, id)
	var out JoinToken
	if err == nil {
		out, err = pgJoinToken(r)
	}
	if err != nil {
		return JoinToken{}, fmt.Errorf("store: get join token %q: %w", id, pgClassify(err))
	}
	return out, nil
}

func (p pgQuerier) ListJoinTokens(ctx context.Context, tenant string) ([]JoinToken, error) {
	rows, err := p.q.ListJoinTokens(ctx, tenant)
	var out []JoinToken
	if err == nil {
		out, err = convertRowsErr(rows, pgJoinToken)
	}
	if err != nil {
		return nil, fmt.Errorf("store: list join tokens of %q: %w", tenant, err)
	}
	return out, nil
}

func (p pgQuerier) RevokeJoinToken(ctx context.Context, id string) (JoinToken, error) {
	r, err := p.q.RevokeJoinToken(ctx, id)
	var out JoinToken
	if err == nil {
		out, err = pgJoinToken(r)
	}
	if err != nil {
		return JoinToken{}, fmt.Errorf("store: revoke join token %q: %w", id, pgClassify(err))
	}
	return out, nil
}

// SpendJoinToken spends in one statement; only when it changed nothing does
// a second read tell a missing token from one that cannot be spent.
func (p pgQuerier) SpendJoinToken(ctx context.Context, id string) (JoinToken, error) {
	r, err := p.q.SpendJoinToken(ctx, id)
	if err == nil {
		var out JoinToken
		if out, err = pgJoinToken(r); err == nil {
			return out, nil
		}
	}
	if err = pgClassify(err); errors.Is(err, ErrNotFound) {
		if _, err = p.q.GetJoinToken(ctx, id); err == nil {
			err = fmt.Errorf("revoked, expired or used up: %w", ErrConflict)
		} else {
			err = pgClassify(err)
		}
	}
	return JoinToken{}, fmt.Errorf("store: spend join token %q: %w", id, err)
}

func (p pgQuerier) CreateNode(ctx context.Context, n Node) (Node, error) {
	r, err := p.q.CreateNode(ctx, pgdb.CreateNodeParams{
		ID: n.ID, Tenant: n.Tenant, Pool: n.Pool, Hostname: n.Hostname, MachineID: n.MachineID,
		Labels: encodeStrings(n.Labels), BcdVersion: n.BcdVersion,
		CertSerial: n.CertSerial, CertPublicKey: n.CertPublicKey, CertNotAfter: n.CertNotAfter,
		SpecGeneration: n.SpecGeneration,
	})
	return pgNodeResult(r, err, "create node %q in %q", n.ID, n.Tenant)
}

// pgNodeResult converts the row of a query that returns one node, or
// wraps its error with what was being done.
func pgNodeResult(r pgdb.Node, err error, what string, args ...any) (Node, error) {
	var out Node
	if err == nil {
		out, err = pgNode(r)
	}
	if err != nil {
		return Node{}, fmt.Errorf("store: "+what+": %w", append(args, pgClassify(err))...)
	}
	return out, nil
}

func (p pgQuerier) GetNode(ctx context.Context, id string) (Node, error) {
	r, err := p.q.GetNode(ctx, id)
	return pgNodeResult(r, err, "get node %q", id)
}

func (p pgQuerier) ListNodes(ctx context.Context, tenant string) ([]Node, error) {
	var rows []pgdb.Node
	var err error
	if tenant == "" {
		rows, err = p.q.ListAllNodes(ctx)
	} else {
		rows, err = p.q.ListTenantNodes(ctx, tenant)
	}
	var out []Node
	if err == nil {
		out, err = convertRowsErr(rows, pgNode)
	}
	if err != nil {
		return nil, fmt.Errorf("store: list nodes of %q: %w", tenant, err)
	}
	return out, nil
}

func (p pgQuerier) RenewNodeCert(ctx context.Context, id, serial string, publicKey []byte, notAfter time.Time) (Node, error) {
	r, err := p.q.RenewNodeCert(ctx, pgdb.RenewNodeCertParams{
		ID: id, CertSerial: serial, CertPublicKey: publicKey, CertNotAfter: notAfter,
	})
	return pgNodeResult(r, err, "renew certificate of node %q", id)
}

func (p pgQuerier) RevokeNode(ctx context.Context, id string) (Node, error) {
	r, err := p.q.RevokeNode(ctx, id)
	return pgNodeResult(r, err, "revoke node %q", id)
}

func (p pgQuerier) NodeSyncStates(ctx context.Context, ids []string) ([]NodeSync, error) {
	rows, err := p.q.NodeSyncStates(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("store: read the sync states of %d nodes: %w", len(ids), err)
	}
	out := make([]NodeSync, len(rows))
	for i, r := range rows {
		out[i] = NodeSync{ID: r.ID, State: NodeState(r.State), SpecGeneration: r.SpecGeneration}
	}
	return out, nil
}

func (p pgQuerier) DeleteNode(ctx context.Context, id string) error {
	n, err := p.q.DeleteNode(ctx, id)
	return pgAffected(n, err, "delete node %q", id)
}

func (p pgQuerier) BeginSession(ctx context.Context, id, bcdVersion, bootID string) (Node, error) {
	r, err := p.q.BeginSession(ctx, pgdb.BeginSessionParams{ID: id, BcdVersion: bcdVersion, BootID: bootID})
	return pgNodeResult(r, err, "begin session of node %q", id)
}

// TouchNodes is one statement for the whole batch (see the query for why
// the ids it returns are exact).
func (p pgQuerier) TouchNodes(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	woke, err := p.q.TouchNodes(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("store: touch %d nodes: %w", len(ids), err)
	}
	return woke, nil
}

func (p pgQuerier) MarkUnreachable(ctx context.Context, cutoff time.Time) ([]string, error) {
	ids, err := p.q.MarkUnreachable(ctx, cutoff)
	if err != nil {
		return nil, fmt.Errorf("store: mark nodes unreachable: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}

func (p pgQuerier) SetNodeConditions(ctx context.Context, id string, conditions []byte) error {
	if conditions == nil {
		conditions = []byte{} // NOT NULL: pgx sends a nil slice as NULL
	}
	n, err := p.q.SetNodeConditions(ctx, pgdb.SetNodeConditionsParams{ID: id, Conditions: conditions})
	return pgAffected(n, err, "set conditions of node %q", id)
}

func (p pgQuerier) PutInventorySection(ctx context.Context, sec InventorySection) error {
	content := sec.Content
	if content == nil {
		content = []byte{} // NOT NULL: pgx sends a nil slice as NULL
	}
	err := p.q.PutInventorySection(ctx, pgdb.PutInventorySectionParams{
		NodeID: sec.NodeID, Name: sec.Name, Hash: sec.Hash, Content: content,
	})
	if err != nil {
		return fmt.Errorf("store: put inventory section %q of node %q: %w", sec.Name, sec.NodeID, pgClassify(err))
	}
	return nil
}

func (p pgQuerier) ListInventorySections(ctx context.Context, nodeID string) ([]InventorySection, error) {
	rows, err := p.q.ListInventorySections(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("store: list inventory of node %q: %w", nodeID, err)
	}
	return convertRows(rows, pgInventorySection), nil
}

func (p pgQuerier) CreateNodeCommand(ctx context.Context, c NodeCommand) (NodeCommand, error) {
	r, err := p.q.CreateNodeCommand(ctx, pgdb.CreateNodeCommandParams{
		ID: c.ID, NodeID: c.NodeID, Kind: c.Kind, Args: encodeStrings(c.Args),
		IdempotencyKey: c.IdempotencyKey, Deadline: c.Deadline,
	})
	return pgCommandResult(r, err, "create command %q for node %q", c.ID, c.NodeID)
}

// pgCommandResult converts the row of a query that returns one command,
// or wraps its error with what was being done.
func pgCommandResult(r pgdb.NodeCommand, err error, what string, args ...any) (NodeCommand, error) {
	var out NodeCommand
	if err == nil {
		out, err = pgNodeCommand(r)
	}
	if err != nil {
		return NodeCommand{}, fmt.Errorf("store: "+what+": %w", append(args, pgClassify(err))...)
	}
	return out, nil
}

// pgCommands converts the rows of a query that returns commands, or
// wraps its error with what was being done.
func pgCommands(rows []pgdb.NodeCommand, err error, what string, args ...any) ([]NodeCommand, error) {
	var out []NodeCommand
	if err == nil {
		out, err = convertRowsErr(rows, pgNodeCommand)
	}
	if err != nil {
		return nil, fmt.Errorf("store: "+what+": %w", append(args, err)...)
	}
	return out, nil
}

func (p pgQuerier) GetNodeCommand(ctx context.Context, id string) (NodeCommand, error) {
	r, err := p.q.GetNodeCommand(ctx, id)
	return pgCommandResult(r, err, "get command %q", id)
}

func (p pgQuerier) GetNodeCommandByKey(ctx context.Context, nodeID, key string) (NodeCommand, error) {
	r, err := p.q.GetNodeCommandByKey(ctx, pgdb.GetNodeCommandByKeyParams{NodeID: nodeID, IdempotencyKey: key})
	return pgCommandResult(r, err, "get command %q of node %q", key, nodeID)
}

func (p pgQuerier) ListNodeCommands(ctx context.Context, nodeID string, limit int) ([]NodeCommand, error) {
	if err := checkLimit("list commands of node "+nodeID, limit); err != nil {
		return nil, err
	}
	rows, err := p.q.ListNodeCommands(ctx, pgdb.ListNodeCommandsParams{NodeID: nodeID, Lim: int32(min(limit, math.MaxInt32))})
	return pgCommands(rows, err, "list commands of node %q", nodeID)
}

func (p pgQuerier) PendingNodeCommands(ctx context.Context, nodeID string, epoch int64, limit int) ([]NodeCommand, error) {
	if err := checkLimit("list pending commands of node "+nodeID, limit); err != nil {
		return nil, err
	}
	rows, err := p.q.PendingNodeCommands(ctx, pgdb.PendingNodeCommandsParams{NodeID: nodeID, SessionEpoch: epoch, Lim: int32(min(limit, math.MaxInt32))})
	return pgCommands(rows, err, "list pending commands of node %q", nodeID)
}

// commandUnchanged is the error of a command update that changed no
// row: ErrConflict when the command exists (it is no longer in a state the
// update accepts), ErrNotFound when it does not.
func (p pgQuerier) commandUnchanged(ctx context.Context, id string) error {
	if _, err := p.q.GetNodeCommand(ctx, id); err != nil {
		return pgClassify(err)
	}
	return ErrConflict
}

func (p pgQuerier) MarkCommandSent(ctx context.Context, id string, epoch int64) error {
	n, err := p.q.MarkCommandSent(ctx, pgdb.MarkCommandSentParams{ID: id, SessionEpoch: epoch})
	if err == nil && n == 0 {
		err = p.commandUnchanged(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("store: mark command %q sent on epoch %d: %w", id, epoch, err)
	}
	return nil
}

func (p pgQuerier) FinishCommand(ctx context.Context, id string, epoch int64, state CommandState, output, errText string) (NodeCommand, error) {
	if err := checkResult(id, state); err != nil {
		return NodeCommand{}, err
	}
	r, err := p.q.FinishCommand(ctx, pgdb.FinishCommandParams{
		ID: id, SessionEpoch: epoch, State: string(state), Output: output, Error: errText,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		err = p.commandUnchanged(ctx, id)
	}
	return pgCommandResult(r, err, "finish command %q on epoch %d", id, epoch)
}

func (p pgQuerier) ExpireCommands(ctx context.Context, resultGrace time.Duration) ([]NodeCommand, error) {
	rows, err := p.q.ExpireCommands(ctx, resultGrace.Microseconds())
	out, err := pgCommands(rows, err, "expire commands")
	sortCommands(out)
	return out, err
}

func (p pgQuerier) NodesWithPendingCommands(ctx context.Context) ([]string, error) {
	ids, err := p.q.NodesWithPendingCommands(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list nodes with pending commands: %w", err)
	}
	return ids, nil
}

func (p pgQuerier) FailInFlightCommands(ctx context.Context, nodeID string) ([]NodeCommand, error) {
	rows, err := p.q.FailInFlightCommands(ctx, nodeID)
	out, err := pgCommands(rows, err, "fail in-flight commands of node %q", nodeID)
	sortCommands(out)
	return out, err
}

func (p pgQuerier) SetNodeLabels(ctx context.Context, id string, labels map[string]string) (Node, error) {
	r, err := p.q.SetNodeLabels(ctx, pgdb.SetNodeLabelsParams{ID: id, Labels: encodeStrings(labels)})
	return pgNodeResult(r, err, "set labels of node %q", id)
}

func (p pgQuerier) SetNodeInventoryLabels(ctx context.Context, id string, labels map[string]string) error {
	n, err := p.q.SetNodeInventoryLabels(ctx, pgdb.SetNodeInventoryLabelsParams{ID: id, InventoryLabels: encodeStrings(labels)})
	return pgAffected(n, err, "set inventory labels of node %q", id)
}
