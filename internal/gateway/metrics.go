package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons: the label values of bettercompute_gateway_refusals_total.
const (
	// refusedNoClientCert: the session protocol without a client certificate.
	refusedNoClientCert = "no_client_cert"
	// refusedForeignCA: a client certificate no node CA of ours issued.
	refusedForeignCA = "foreign_ca"
	// refusedBadClientCert: a client certificate from our node CA that does
	// not verify (expired, wrong usage) or names no node.
	refusedBadClientCert = "bad_client_cert"
	// refusedHandshake: any other TLS handshake failure (old TLS, no
	// common protocol, a scanner).
	refusedHandshake = "handshake"
	// refusedNoHello: the connection ended or timed out before a Hello.
	refusedNoHello = "no_hello"
	// refusedNodeMismatch: Hello's node id differs from the certificate's.
	refusedNodeMismatch = "node_id_mismatch"
	// refusedRevoked: the node is revoked, or unknown to the store.
	refusedRevoked = "revoked"
	// refusedProtocol: a malformed, oversized or out-of-order frame, at any
	// point of the session.
	refusedProtocol = "protocol_error"
	// refusedVersion: a protocol version the gateway does not speak.
	refusedVersion = "unsupported_version"
	// refusedInternal: the store failed while opening the session.
	refusedInternal = "internal_error"
)

// metrics are the gateway's Prometheus metrics.
type metrics struct {
	refusals *prometheus.CounterVec // reason
	sessions prometheus.Gauge
	closes   *prometheus.CounterVec // reason
	commands prometheus.Counter
	results  *prometheus.CounterVec // outcome
	claims   *prometheus.CounterVec // outcome
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bettercompute_gateway_refusals_total",
			Help: "Connections and sessions the gateway refused or ended for the peer's fault, by reason.",
		}, []string{"reason"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bettercompute_gateway_sessions",
			Help: "Node sessions open on this gateway.",
		}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bettercompute_gateway_session_closes_total",
			Help: "Node sessions ended, by reason.",
		}, []string{"reason"}),
		commands: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bettercompute_gateway_commands_sent_total",
			Help: "Commands sent to nodes.",
		}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bettercompute_gateway_command_results_total",
			Help: "Command results received from nodes, by outcome (stored, duplicate, stale, unknown_command, error).",
		}, []string{"outcome"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bettercompute_gateway_allocation_claims_total",
			Help: "AllocationBound claims received from nodes, by outcome (bound, held, stale, refused).",
		}, []string{"outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.refusals, m.sessions, m.closes, m.commands, m.results, m.claims} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: register metrics: %w", err)
		}
	}
	return m, nil
}

// refuse counts a refusal and logs it.
func (g *Gateway) refuse(reason string, remote net.Addr, nodeID string, err error) {
	g.metrics.refusals.WithLabelValues(reason).Inc()
	g.log.Info("gateway: refused", "reason", reason, "remote", remote.String(), "node", nodeID, "err", err)
}

// refuseHandshake classifies a failed TLS handshake.
func (g *Gateway) refuseHandshake(remote net.Addr, err error) {
	reason := refusedHandshake
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) {
		reason = refusedBadClientCert
		var unknown x509.UnknownAuthorityError
		if errors.As(verr.Err, &unknown) {
			reason = refusedForeignCA
		}
	}
	g.refuse(reason, remote, "", err)
}
