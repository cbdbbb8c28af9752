package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/agent/v1/agentv1connect"
)

// renewAtFraction is the share of a certificate's life after which bcd
// renews it: late enough not to churn, early enough that a control plane
// down for a while (up to 40% of the lifetime, ~9.6 h of a 24 h
// certificate) does not strand the node.
const renewAtFraction = 0.6

// renewRetry is the wait after a failed renewal, bounded below so a
// certificate near its end is retried often, and above so a dead server
// is not hammered.
func renewRetry(remaining time.Duration) time.Duration {
	return min(max(remaining/10, 10*time.Second), 5*time.Minute)
}

// renewAt is when cert is due for renewal.
func renewAt(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(time.Duration(float64(life) * renewAtFraction))
}

// scheduleRenewal arms the renewal timer for id's certificate. The timer's
// callback runs on a goroutine of its own that ends with it.
func (n *Node) scheduleRenewal(id *identity) {
	n.scheduleRenewalIn(renewAt(id.cert.Leaf).Sub(n.now()))
}

// scheduleNextRenewal follows a successful renewal. A certificate whose
// 60% mark is already past (short lifetimes, a backdated NotBefore, a clock
// ahead) would otherwise be renewed again at once, forever: then the next
// renewal waits half of what is left of the new certificate, at least a
// second.
func (n *Node) scheduleNextRenewal(id *identity) {
	now := n.now()
	wait := max(renewAt(id.cert.Leaf).Sub(now), id.cert.Leaf.NotAfter.Sub(now)/2, time.Second)
	n.scheduleRenewalIn(wait)
}

func (n *Node) scheduleRenewalIn(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// Run cancels runCtx before it stops the timer and waits for work, so
	// nothing is scheduled after that.
	if n.runCtx.Err() != nil {
		return
	}
	n.work.Add(1)
	n.renewTimer = time.AfterFunc(max(d, 0), func() {
		defer n.work.Done()
		n.renewNow()
	})
}

// renewNow renews, then schedules the next renewal or a retry.
func (n *Node) renewNow() {
	id, err := n.renew(n.runCtx)
	if err != nil {
		if n.runCtx.Err() != nil {
			return
		}
		wait := renewRetry(n.id.Load().cert.Leaf.NotAfter.Sub(n.now()))
		n.log.Warn("certificate renewal failed; retrying", "err", err, "in", wait, "not_after", n.id.Load().cert.Leaf.NotAfter)
		n.scheduleRenewalIn(wait)
		return
	}
	n.log.Info("renewed the node certificate; the next connection uses it", "not_after", id.cert.Leaf.NotAfter)
	n.scheduleNextRenewal(id)
}

// renew asks the gateway for a certificate for a new key, proving
// possession of the current key by signing SHA-256 of the new CSR with it,
// saves the pair and makes it the one the next connection presents. The
// live session is not reconnected: it keeps the identity it was dialed
// with, whose key signs the allocation claims sent on it.
func (n *Node) renew(ctx context.Context) (*identity, error) {
	cur := n.id.Load()
	curKey, ok := cur.cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("renew: the node key is a %T, not ECDSA", cur.cert.PrivateKey)
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	csr, err := newCSR(key)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(csr)
	sig, err := ecdsa.SignASN1(rand.Reader, curKey, sum[:])
	if err != nil {
		return nil, fmt.Errorf("renew: sign the request: %w", err)
	}
	n.mu.Lock()
	addr := n.gateway
	n.mu.Unlock()
	if addr == "" {
		addr = cur.config.GatewayAddresses[0]
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("renew: gateway address %q: %w", addr, err)
	}
	tr := h2Transport(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      cur.roots,
		ServerName:   host,
		Certificates: []tls.Certificate{cur.cert},
	})
	defer tr.CloseIdleConnections()
	client := agentv1connect.NewNodeServiceClient(&http.Client{Transport: tr, Timeout: time.Minute}, "https://"+addr)
	resp, err := client.Renew(ctx, connect.NewRequest(&agentv1.RenewRequest{
		NodeId: cur.config.NodeID, CsrDer: csr, Signature: sig,
	}))
	if err != nil {
		return nil, fmt.Errorf("renew at %s: %w", addr, err)
	}
	cert, err := checkIssued(resp.Msg.GetCertificateDer(), key, cur.config.NodeID, cur.bundle, n.now())
	if err != nil {
		return nil, fmt.Errorf("renew: the server's answer: %w", err)
	}
	if err := saveRenewed(n.cfg.DataDir, key, cert.Raw); err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	next := *cur
	next.cert = tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
	n.id.Store(&next)
	// A resumed TLS session would carry the old certificate's identity.
	n.tlsCache.Store(&tlsSessionCache{tls.NewLRUClientSessionCache(1)})
	return &next, nil
}

// h2Transport is an HTTP/2-only transport over cfg, for the Connect calls
// (join, renew) on the gateway's listener.
func h2Transport(cfg *tls.Config) *http.Transport {
	tr := &http.Transport{
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: dialTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
	}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	return tr
}
