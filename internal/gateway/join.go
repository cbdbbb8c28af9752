package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/agent/v1/agentv1connect"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/requestid"
	"github.com/better-compute/better-compute/internal/store"
)

// Join and renew: the two calls a node makes outside its session, over
// plain HTTP on the gateway's TLS listener (no client certificate). Join
// trades a join token and a key request for a node identity; Renew trades a
// key request signed by the node's current key for a certificate for the
// new key. Each is one store transaction that either does everything (spend,
// node, certificate, audit event) or nothing; a refusal stores only its
// deny audit event and is counted by reason.

const (
	// DefaultCertTTL is JoinConfig.CertTTL's default: nodes renew at 60% of
	// it, so a node offline for under about ten hours keeps its identity.
	DefaultCertTTL = 24 * time.Hour

	// joinMaxRequestBytes bounds a join or renew request: a token, a CSR and
	// host facts fit in a few KiB; anything larger is not a node.
	joinMaxRequestBytes = 64 << 10
	// maxFactLength bounds each host fact stored on the node.
	maxFactLength = 256

	joinAction  = "compute:nodes:join"
	renewAction = "compute:nodes:renew"
)

// Refusal reasons: the label values of bettercompute_join_refusals_total
// and bettercompute_renew_refusals_total.
const (
	joinRefusedMalformed   = "malformed_token"
	joinRefusedForeignPin  = "foreign_pin"
	joinRefusedUnknown     = "unknown_token"
	joinRefusedWrongSecret = "wrong_secret"
	joinRefusedExpired     = "expired"
	joinRefusedRevoked     = "revoked"
	joinRefusedUsedUp      = "used_up"
	joinRefusedBadCSR      = "bad_csr"
	joinRefusedBadFacts    = "bad_facts"
	renewRefusedBadRequest = "bad_request"
	renewRefusedUnknown    = "unknown_node"
	renewRefusedRevoked    = "revoked"
	renewRefusedNoProof    = "no_proof"
	renewRefusedBadCSR     = "bad_csr"
)

// JoinConfig configures a JoinService.
type JoinConfig struct {
	// Store holds join tokens, nodes and the audit log; required.
	Store *store.Store
	// Authority signs node certificates and names the pin join tokens must
	// carry; required.
	Authority *pki.Authority
	// CertTTL is the node certificate lifetime; DefaultCertTTL when zero.
	CertTTL time.Duration
	// GatewayAddresses are the host:port addresses a node should hold its
	// session with, in order of preference.
	GatewayAddresses []string
	// Logger receives refusals and internal errors; nil discards them.
	Logger *slog.Logger
	// Metrics receives bettercompute_join_refusals_total{reason} and
	// bettercompute_renew_refusals_total{reason}; nil keeps them
	// unregistered.
	Metrics prometheus.Registerer
}

// JoinService serves JoinService.Join and NodeService.Renew. It is safe for
// concurrent use.
type JoinService struct {
	st        *store.Store
	authority *pki.Authority
	ttl       time.Duration
	addresses []string
	log       *slog.Logger

	joinRefusals  *prometheus.CounterVec // reason
	renewRefusals *prometheus.CounterVec // reason
}

var (
	_ agentv1connect.JoinServiceHandler = (*JoinService)(nil)
	_ agentv1connect.NodeServiceHandler = (*JoinService)(nil)
)

// NewJoinService returns a JoinService. It panics when Store or Authority
// is missing, or when Metrics refuses the counters for another reason than
// holding them already (a second JoinService on one registry shares them).
func NewJoinService(cfg JoinConfig) *JoinService {
	if cfg.Store == nil || cfg.Authority == nil {
		panic("gateway: NewJoinService needs a Store and an Authority")
	}
	s := &JoinService{
		st:        cfg.Store,
		authority: cfg.Authority,
		ttl:       cfg.CertTTL,
		addresses: append([]string(nil), cfg.GatewayAddresses...),
		log:       cfg.Logger,
		joinRefusals: registerJoinCounter(cfg.Metrics, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bettercompute_join_refusals_total",
			Help: "Join requests refused, by reason.",
		}, []string{"reason"})),
		renewRefusals: registerJoinCounter(cfg.Metrics, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bettercompute_renew_refusals_total",
			Help: "Certificate renewals refused, by reason.",
		}, []string{"reason"})),
	}
	if s.ttl <= 0 {
		s.ttl = DefaultCertTTL
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s
}

// registerJoinCounter registers c, or returns the equal counter reg already
// holds.
func registerJoinCounter(reg prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("gateway: register join metrics: %v", err))
	}
	return c
}

// Handlers returns the HTTP handlers to mount, by path: the JoinService's
// and the NodeService's, with a request size limit and request ids.
func (s *JoinService) Handlers() map[string]http.Handler {
	opts := connect.WithReadMaxBytes(joinMaxRequestBytes)
	joinPath, join := agentv1connect.NewJoinServiceHandler(s, opts)
	nodePath, node := agentv1connect.NewNodeServiceHandler(s, opts)
	return map[string]http.Handler{
		joinPath: requestid.Middleware(join),
		nodePath: requestid.Middleware(node),
	}
}

// joinRefusal is a request refused for the caller's fault: what the caller is
// told, and what the deny audit event and the metrics record.
type joinRefusal struct {
	code     connect.Code
	reason   string // metric label
	msg      string // for the caller and the audit event
	tenant   string // "" when unknown
	resource string // Cedar entity; "" when unknown
}

func (r *joinRefusal) Error() string { return r.msg }

// Join admits a node: it spends one use of the join token, issues the
// node's certificate and records the node, all in one transaction.
func (s *JoinService) Join(ctx context.Context, req *connect.Request[agentv1.JoinRequest]) (*connect.Response[agentv1.JoinResponse], error) {
	m := req.Msg
	tokenID, hash, pin, err := pki.ParseJoinToken(m.GetToken())
	if err != nil {
		return nil, s.fail(ctx, joinAction, &joinRefusal{code: connect.CodeInvalidArgument, reason: joinRefusedMalformed, msg: err.Error()})
	}
	if subtle.ConstantTimeCompare([]byte(pin), []byte(s.authority.ServingPin())) != 1 {
		return nil, s.fail(ctx, joinAction, &joinRefusal{
			code: connect.CodeFailedPrecondition, reason: joinRefusedForeignPin,
			msg: fmt.Sprintf("this join token was made by another deployment (join token %s is pinned to %s, this gateway serves %s); use a token from this control plane", tokenID, pin, s.authority.ServingPin()),
		})
	}
	facts := m.GetFacts()
	for _, f := range []struct{ name, value string }{
		{"hostname", facts.GetHostname()}, {"machine_id", facts.GetMachineId()}, {"bcd_version", facts.GetBcdVersion()},
	} {
		if len(f.value) > maxFactLength {
			return nil, s.fail(ctx, joinAction, &joinRefusal{
				code: connect.CodeInvalidArgument, reason: joinRefusedBadFacts,
				msg: fmt.Sprintf("facts.%s is %d bytes long, more than %d; send what the host reports", f.name, len(f.value), maxFactLength),
			})
		}
		if hasControl(f.value) {
			return nil, s.fail(ctx, joinAction, &joinRefusal{
				code: connect.CodeInvalidArgument, reason: joinRefusedBadFacts,
				msg: fmt.Sprintf("facts.%s holds a control character (%q); send what the host reports", f.name, f.value),
			})
		}
	}

	nodeID := pki.NewNodeID()
	var node store.Node
	var cert *x509.Certificate
	// Shared: the joins of one multi-use token all spend its one row, and
	// in transactions of their own they fail on each other's updates.
	err = s.st.InSharedTx(ctx, func(ctx context.Context, q store.Querier) error {
		tok, err := q.GetJoinToken(ctx, tokenID)
		if errors.Is(err, store.ErrNotFound) {
			return unknownJoinToken(tokenID, "", joinRefusedUnknown)
		} else if err != nil {
			return err
		}
		// Before spending: a wrong secret must not use the token up.
		if subtle.ConstantTimeCompare(tok.SecretHash, hash) != 1 {
			return unknownJoinToken(tokenID, tok.Tenant, joinRefusedWrongSecret)
		}
		tok, err = q.SpendJoinToken(ctx, tokenID)
		switch {
		case errors.Is(err, store.ErrConflict):
			return whyUnspendable(ctx, q, tokenID)
		case errors.Is(err, store.ErrNotFound):
			return unknownJoinToken(tokenID, "", joinRefusedUnknown)
		case err != nil:
			return err
		}
		c, err := s.authority.SignNodeCSR(m.GetCsrDer(), nodeID, s.ttl)
		if errors.Is(err, pki.ErrBadCSR) {
			return &joinRefusal{code: connect.CodeInvalidArgument, reason: joinRefusedBadCSR, msg: err.Error(), tenant: tok.Tenant, resource: joinTokenRef(tok.Tenant, tokenID)}
		} else if err != nil {
			return err
		}
		n, err := q.CreateNode(ctx, store.Node{
			ID: nodeID, Tenant: tok.Tenant, Pool: tok.Pool, Labels: tok.Labels,
			Hostname: facts.GetHostname(), MachineID: facts.GetMachineId(), BcdVersion: facts.GetBcdVersion(),
			CertSerial: c.SerialNumber.Text(16), CertPublicKey: c.RawSubjectPublicKeyInfo, CertNotAfter: c.NotAfter,
		})
		if err != nil {
			return err
		}
		if _, err := q.InsertAuditEvent(ctx, store.AuditEvent{
			Tenant: tok.Tenant, Action: joinAction, Resource: joinNodeRef(tok.Tenant, nodeID), Decision: "allow",
			Reason: "joined with join token " + tokenID, RequestID: requestid.From(ctx),
		}); err != nil {
			return err
		}
		node, cert = n, c
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, joinAction, err)
	}
	s.log.InfoContext(ctx, "node joined", "node", node.ID, "tenant", node.Tenant, "pool", node.Pool, "hostname", node.Hostname, "join_token", tokenID)
	return connect.NewResponse(&agentv1.JoinResponse{
		NodeId:            node.ID,
		CertificateDer:    cert.Raw,
		CaCertificatesDer: s.authority.TrustBundleDER(),
		GatewayAddresses:  append([]string(nil), s.addresses...),
		NotAfter:          timestamppb.New(cert.NotAfter),
	}), nil
}

// unknownJoinToken answers a token that does not exist or whose secret is
// wrong alike, so that the answer does not tell which ids exist.
func unknownJoinToken(id, tenant, reason string) *joinRefusal {
	r := &joinRefusal{
		code: connect.CodeUnauthenticated, reason: reason, tenant: tenant,
		msg: "unknown join token " + id + "; check that you copied the whole token, or create a new one",
	}
	if tenant != "" {
		r.resource = joinTokenRef(tenant, id)
	}
	return r
}

// whyUnspendable reads a token SpendJoinToken refused and says why.
func whyUnspendable(ctx context.Context, q store.Querier, id string) error {
	tok, err := q.GetJoinToken(ctx, id)
	if err != nil {
		return err
	}
	now, err := q.Now(ctx)
	if err != nil {
		return err
	}
	r := &joinRefusal{code: connect.CodePermissionDenied, tenant: tok.Tenant, resource: joinTokenRef(tok.Tenant, id)}
	switch {
	case !tok.RevokedAt.IsZero():
		r.reason, r.msg = joinRefusedRevoked, fmt.Sprintf("join token %s was revoked at %s; ask for a new one", id, tok.RevokedAt.UTC().Format(time.RFC3339))
	case !tok.ExpiresAt.After(now):
		r.reason, r.msg = joinRefusedExpired, fmt.Sprintf("join token %s expired at %s; ask for a new one", id, tok.ExpiresAt.UTC().Format(time.RFC3339))
	default:
		r.reason, r.msg = joinRefusedUsedUp, fmt.Sprintf("join token %s has no uses left (%d of %d used); ask for a new one", id, tok.Uses, tok.MaxUses)
	}
	return r
}

// Renew issues a certificate for the node's new key, when the request is
// signed by the key of the node's current certificate.
func (s *JoinService) Renew(ctx context.Context, req *connect.Request[agentv1.RenewRequest]) (*connect.Response[agentv1.RenewResponse], error) {
	m := req.Msg
	nodeID := m.GetNodeId()
	if !validRenewNodeID(nodeID) {
		return nil, s.fail(ctx, renewAction, &joinRefusal{code: connect.CodeInvalidArgument, reason: renewRefusedBadRequest, msg: "node_id is missing or not a node id; send the id bcd join was given"})
	}
	var node store.Node
	var cert *x509.Certificate
	err := s.st.InTx(ctx, func(ctx context.Context, q store.Querier) error {
		n, err := q.GetNode(ctx, nodeID)
		if errors.Is(err, store.ErrNotFound) {
			return &joinRefusal{code: connect.CodeNotFound, reason: renewRefusedUnknown, msg: "node " + nodeID + " is not known to this control plane; join it again"}
		} else if err != nil {
			return err
		}
		revoked := &joinRefusal{code: connect.CodePermissionDenied, reason: renewRefusedRevoked, msg: "node " + nodeID + " is revoked", tenant: n.Tenant, resource: joinNodeRef(n.Tenant, nodeID)}
		if n.State == store.NodeRevoked || !n.RevokedAt.IsZero() {
			return revoked
		}
		if !provesPossession(n.CertPublicKey, m.GetCsrDer(), m.GetSignature()) {
			return &joinRefusal{
				code: connect.CodePermissionDenied, reason: renewRefusedNoProof, tenant: n.Tenant, resource: joinNodeRef(n.Tenant, nodeID),
				msg: "renewal must be signed by the node's current key (an ECDSA signature over SHA-256 of csr_der); if that key is lost, join the node again",
			}
		}
		c, err := s.authority.SignNodeCSR(m.GetCsrDer(), nodeID, s.ttl)
		if errors.Is(err, pki.ErrBadCSR) {
			return &joinRefusal{code: connect.CodeInvalidArgument, reason: renewRefusedBadCSR, msg: err.Error(), tenant: n.Tenant, resource: joinNodeRef(n.Tenant, nodeID)}
		} else if err != nil {
			return err
		}
		n, err = q.RenewNodeCert(ctx, nodeID, c.SerialNumber.Text(16), c.RawSubjectPublicKeyInfo, c.NotAfter)
		if errors.Is(err, store.ErrNotFound) {
			return revoked // revoked or deleted since GetNode
		} else if err != nil {
			return err
		}
		if _, err := q.InsertAuditEvent(ctx, store.AuditEvent{
			Tenant: n.Tenant, Action: renewAction, Resource: joinNodeRef(n.Tenant, nodeID), Decision: "allow",
			Reason: "renewed its certificate, serial " + n.CertSerial, RequestID: requestid.From(ctx),
		}); err != nil {
			return err
		}
		node, cert = n, c
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, renewAction, err)
	}
	s.log.InfoContext(ctx, "node renewed its certificate", "node", node.ID, "tenant", node.Tenant, "not_after", cert.NotAfter)
	return connect.NewResponse(&agentv1.RenewResponse{
		CertificateDer: cert.Raw,
		NotAfter:       timestamppb.New(cert.NotAfter),
	}), nil
}

// provesPossession reports whether sig is an ECDSA signature over
// SHA-256(csrDER) by the public key publicKeyDER (PKIX).
func provesPossession(publicKeyDER, csrDER, sig []byte) bool {
	if len(sig) == 0 || len(publicKeyDER) == 0 {
		return false
	}
	pub, err := x509.ParsePKIXPublicKey(publicKeyDER)
	if err != nil {
		return false
	}
	ec, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		return false
	}
	sum := sha256.Sum256(csrDER)
	return ecdsa.VerifyASN1(ec, sum[:], sig)
}

// validRenewNodeID accepts what a node id may look like (pki.NewNodeID's
// form and other short lowercase names), so that nothing else reaches the
// store or the audit log.
func validRenewNodeID(id string) bool {
	if id == "" || len(id) > 63 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// fail turns a handler's error into what the caller sees. A refusal is
// counted, logged and audited (in its own statement: the transaction that
// found it rolled back), and answered with its code and message; anything
// else is logged in full and answered with a generic message and the
// request id to quote.
func (s *JoinService) fail(ctx context.Context, action string, err error) error {
	var r *joinRefusal
	if !errors.As(err, &r) {
		switch {
		case errors.Is(err, context.Canceled):
			return connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
		case errors.Is(err, context.DeadlineExceeded):
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("request timed out"))
		}
		id := requestid.From(ctx)
		s.log.ErrorContext(ctx, "join service: request failed", "action", action, "request_id", id, "err", err)
		return connect.NewError(connect.CodeInternal, errors.New("internal error; the control plane's log has the detail under request id "+id))
	}
	counter := s.joinRefusals
	if action == renewAction {
		counter = s.renewRefusals
	}
	counter.WithLabelValues(r.reason).Inc()
	s.log.InfoContext(ctx, "join service: refused", "action", action, "reason", r.reason, "tenant", r.tenant, "resource", r.resource, "msg", r.msg)
	if _, aerr := s.st.InsertAuditEvent(context.WithoutCancel(ctx), store.AuditEvent{
		Tenant: r.tenant, Action: action, Resource: r.resource, Decision: "deny", Reason: r.msg, RequestID: requestid.From(ctx),
	}); aerr != nil {
		s.log.ErrorContext(ctx, "join service: write audit event", "action", action, "err", aerr)
	}
	return connect.NewError(r.code, errors.New(r.msg))
}

// joinNodeRef is the node's Cedar entity, Node::"<tenant>/<id>".
func joinNodeRef(tenant, id string) string { return iam.ScopedRef("Node", tenant, id).String() }

// joinTokenRef is the token's Cedar entity, JoinToken::"<tenant>/<id>".
func joinTokenRef(tenant, id string) string { return iam.ScopedRef("JoinToken", tenant, id).String() }
