package store

import (
	"context"
	"time"
)

// The node rows: the deployment's certificate authorities, join tokens,
// nodes with their inventory, and the per-node command queue.

// CA is one certificate authority of the deployment. Its private key is
// stored encrypted with a key held outside the store (internal/pki).
type CA struct {
	// Name is "root", "node" or "serving".
	Name string
	// CertDER is the CA certificate.
	CertDER []byte
	// KeyEncrypted is the sealed private key.
	KeyEncrypted []byte
	// CreatedAt comes from the store's clock.
	CreatedAt time.Time
}

// JoinToken admits nodes. The secret is stored only as its hash.
type JoinToken struct {
	// ID is the token's public part and key.
	ID string
	// Tenant will own the nodes that join with it.
	Tenant string
	// Pool, when set, is where joined nodes are adopted.
	Pool string
	// SecretHash is SHA-256 of the secret part.
	SecretHash []byte
	// MaxUses is how many joins it allows; Uses how many it was spent on.
	MaxUses, Uses int
	// Labels are given to joined nodes.
	Labels map[string]string
	// Description says what it is for.
	Description string
	// CreatedAt and ExpiresAt come from the store's clock.
	CreatedAt, ExpiresAt time.Time
	// RevokedAt is zero unless it was revoked.
	RevokedAt time.Time
}

// NodeState is a node's lifecycle state.
type NodeState string

const (
	// NodeJoined has joined but never held a session.
	NodeJoined NodeState = "joined"
	// NodeReady holds a session and was heard from recently.
	NodeReady NodeState = "ready"
	// NodeUnreachable was silent for three heartbeat intervals.
	NodeUnreachable NodeState = "unreachable"
	// NodeRevoked may never connect again.
	NodeRevoked NodeState = "revoked"
)

// Node is a joined server.
type Node struct {
	// ID is the node's id, as in its SPIFFE ID.
	ID string
	// Tenant owns the node.
	Tenant string
	// Pool is the pool of its tenant it is adopted into ("" for none):
	// the one its join token named, or AdoptNode's.
	Pool string
	// Cordoned nodes keep their reservations but get no new ones.
	Cordoned bool
	// Hostname and MachineID are what the node said when it joined.
	Hostname, MachineID string
	// State is its lifecycle state.
	State NodeState
	// Labels come from the join token and the operator.
	Labels map[string]string
	// InventoryLabels come from the node's inventory (gpu.model,
	// gpu.count, cpu.count, numa.nodes, memory.totalGiB), written by the
	// gateway as reports arrive.
	InventoryLabels map[string]string
	// BcdVersion is the bcd build of its latest session.
	BcdVersion string
	// CertSerial, CertPublicKey (PKIX DER) and CertNotAfter describe its
	// current certificate; renewal replaces them.
	CertSerial    string
	CertPublicKey []byte
	CertNotAfter  time.Time
	// SessionEpoch grows with every session; 0 before the first.
	SessionEpoch int64
	// BootID is the host's boot id at the latest session.
	BootID string
	// SpecGeneration is the generation of the spec the control plane wants.
	SpecGeneration int64
	// Conditions is the node's latest conditions, as the API's JSON.
	Conditions []byte
	// LastSeenAt is when the gateway last heard from it (to a heartbeat).
	LastSeenAt time.Time
	// CreatedAt comes from the store's clock; RevokedAt is zero unless revoked.
	CreatedAt, RevokedAt time.Time
}

// InventorySection is one section of a node's reported inventory.
type InventorySection struct {
	// NodeID and Name ("host", "cpu", "memory", "disks", "nics", "gpus") are the key.
	NodeID, Name string
	// Hash is SHA-256 of Content.
	Hash []byte
	// Content is the section as bcd sent it (agentv1.Inventory, binary).
	Content []byte
	// UpdatedAt comes from the store's clock.
	UpdatedAt time.Time
}

// CommandState is where a node command is.
type CommandState string

const (
	// CommandQueued waits for its node.
	CommandQueued CommandState = "queued"
	// CommandSent was sent on a session.
	CommandSent CommandState = "sent"
	// CommandSucceeded ran and succeeded.
	CommandSucceeded CommandState = "succeeded"
	// CommandFailed ran and failed.
	CommandFailed CommandState = "failed"
	// CommandExpired passed its deadline before it ran.
	CommandExpired CommandState = "expired"
	// CommandUnknown was in flight when its node lost its journal.
	CommandUnknown CommandState = "unknown"
)

// NodeCommand is one command in a node's queue.
type NodeCommand struct {
	// ID is unique; the node runs an id at most once.
	ID string
	// NodeID is the node it is for.
	NodeID string
	// Kind and Args say what to run.
	Kind string
	Args map[string]string
	// IdempotencyKey, when set, is unique per node: a second create with it
	// returns ErrConflict.
	IdempotencyKey string
	// State is where it is.
	State CommandState
	// Output and Error are the result, bounded by the caller.
	Output, Error string
	// SessionEpoch is the epoch of the session it was sent on.
	SessionEpoch int64
	// CreatedAt, Deadline, SentAt and FinishedAt come from the store's clock;
	// SentAt and FinishedAt are zero until then.
	CreatedAt, Deadline, SentAt, FinishedAt time.Time
}

// NodeQuerier is the nodes part of Querier, with the same conventions as
// IAMQuerier.
type NodeQuerier interface {
	// CreateCA inserts a CA; ErrConflict when one of that name exists (two
	// servers starting together: the loser reads the winner's).
	CreateCA(ctx context.Context, ca CA) (CA, error)
	// GetCA returns one CA.
	GetCA(ctx context.Context, name string) (CA, error)

	// CreateJoinToken inserts t, stamping CreatedAt.
	CreateJoinToken(ctx context.Context, t JoinToken) (JoinToken, error)
	// GetJoinToken returns one join token.
	GetJoinToken(ctx context.Context, id string) (JoinToken, error)
	// ListJoinTokens returns a tenant's join tokens, newest first.
	ListJoinTokens(ctx context.Context, tenant string) ([]JoinToken, error)
	// RevokeJoinToken stamps RevokedAt unless already revoked.
	RevokeJoinToken(ctx context.Context, id string) (JoinToken, error)
	// SpendJoinToken atomically takes one use of a token that is not
	// revoked, not expired by the store's clock and not used up, in one
	// statement, so two racing joins never both spend the last use; it
	// returns ErrConflict when the token cannot be spent (the caller reads
	// it to say why) and ErrNotFound when it does not exist.
	SpendJoinToken(ctx context.Context, id string) (JoinToken, error)

	// CreateNode inserts n (state joined), stamping CreatedAt.
	CreateNode(ctx context.Context, n Node) (Node, error)
	// GetNode returns one node.
	GetNode(ctx context.Context, id string) (Node, error)
	// ListNodes returns a tenant's nodes by id; every node when tenant is "".
	ListNodes(ctx context.Context, tenant string) ([]Node, error)
	// RenewNodeCert replaces the node's certificate fields; ErrNotFound for
	// a missing or revoked node.
	RenewNodeCert(ctx context.Context, id, serial string, publicKey []byte, notAfter time.Time) (Node, error)
	// RevokeNode sets state revoked and stamps RevokedAt.
	RevokeNode(ctx context.Context, id string) (Node, error)
	// NodeSyncStates returns, for those of ids that exist, each node's
	// state and spec generation: what a gateway compares with the sessions
	// it holds, to act on what other processes changed (a revocation, a
	// placement). A node missing from the answer was deleted.
	NodeSyncStates(ctx context.Context, ids []string) ([]NodeSync, error)
	// DeleteNode deletes a node with its inventory and commands.
	DeleteNode(ctx context.Context, id string) error
	// BeginSession increments the node's session epoch, sets it ready with
	// the session's bcd version and boot id, stamps LastSeenAt, and returns
	// the node; ErrNotFound for a missing or revoked node.
	BeginSession(ctx context.Context, id, bcdVersion, bootID string) (Node, error)
	// TouchNodes stamps LastSeenAt for every id in one statement (the
	// gateway's heartbeat batch), and sets unreachable ones ready again;
	// it returns the ids that became ready.
	TouchNodes(ctx context.Context, ids []string) ([]string, error)
	// MarkUnreachable sets ready nodes last seen before cutoff unreachable
	// and returns their ids.
	MarkUnreachable(ctx context.Context, cutoff time.Time) ([]string, error)
	// SetNodeLabels replaces the labels of the node's join token and
	// operator.
	SetNodeLabels(ctx context.Context, id string, labels map[string]string) (Node, error)
	// SetNodeInventoryLabels replaces the labels the node's inventory
	// gives it.
	SetNodeInventoryLabels(ctx context.Context, id string, labels map[string]string) error
	// SetNodeConditions stores the node's latest conditions.
	SetNodeConditions(ctx context.Context, id string, conditions []byte) error
	// PutInventorySection inserts or replaces a section.
	PutInventorySection(ctx context.Context, s InventorySection) error
	// ListInventorySections returns a node's sections by name.
	ListInventorySections(ctx context.Context, nodeID string) ([]InventorySection, error)

	// CreateNodeCommand queues c, stamping CreatedAt; ErrConflict when the
	// node already has a command with c's IdempotencyKey; ErrNotFound for a
	// missing node.
	CreateNodeCommand(ctx context.Context, c NodeCommand) (NodeCommand, error)
	// GetNodeCommand returns one command.
	GetNodeCommand(ctx context.Context, id string) (NodeCommand, error)
	// GetNodeCommandByKey returns the node's command with an idempotency key.
	GetNodeCommandByKey(ctx context.Context, nodeID, key string) (NodeCommand, error)
	// ListNodeCommands returns a node's commands, newest first, at most limit.
	ListNodeCommands(ctx context.Context, nodeID string, limit int) ([]NodeCommand, error)
	// PendingNodeCommands returns, oldest first and at most limit, the
	// node's commands to send on session epoch: queued ones, and ones sent
	// on an older session that never finished (their frame may have died
	// with that session; the node runs an id at most once), whose deadline
	// has not passed.
	PendingNodeCommands(ctx context.Context, nodeID string, epoch int64, limit int) ([]NodeCommand, error)
	// MarkCommandSent sets a command sent on the given epoch; ErrConflict
	// unless it is queued or was sent on an older epoch and never finished.
	MarkCommandSent(ctx context.Context, id string, epoch int64) error
	// FinishCommand records a result for a queued or sent command whose
	// SessionEpoch is at most epoch, or a result other than unknown for an
	// unknown one (the node answered after all); ErrConflict when it
	// already finished or the result comes from an older session than the
	// one it was sent on.
	FinishCommand(ctx context.Context, id string, epoch int64, state CommandState, output, errText string) (NodeCommand, error)
	// NodesWithPendingCommands returns, in order, the nodes with commands
	// to send before their deadline: queued, or sent on a session older
	// than the node's current one.
	NodesWithPendingCommands(ctx context.Context) ([]string, error)
	// ExpireCommands, by the store's clock, expires every queued command
	// whose deadline passed, sets every sent command with no result by its
	// deadline plus resultGrace to unknown, and returns them.
	ExpireCommands(ctx context.Context, resultGrace time.Duration) ([]NodeCommand, error)
	// FailInFlightCommands sets every sent command of the node to unknown
	// (its journal was lost) and returns them.
	FailInFlightCommands(ctx context.Context, nodeID string) ([]NodeCommand, error)
}

// NodeSync is what NodeSyncStates tells of one node.
type NodeSync struct {
	// ID is the node's id.
	ID string
	// State is its state; NodeRevoked ends its session.
	State NodeState
	// SpecGeneration is the generation of the spec it should hold.
	SpecGeneration int64
}
