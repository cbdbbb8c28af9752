package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/agent/v1/agentv1connect"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
	"github.com/better-compute/better-compute/internal/wire"
)

func TestWelcome(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{interval: 200 * time.Millisecond})
		n := b.newNode(t, "gpu-01")
		before, err := b.st.Now(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for epoch := int64(1); epoch <= 3; epoch++ {
			f, w := b.connect(t, n, &agentv1.Hello{BcdVersion: "v1.2.3", BootId: "boot-a"})
			if w.GetSessionEpoch() != epoch || w.GetProtocolVersion() != agentv1.ProtocolVersion_PROTOCOL_VERSION_1 ||
				w.GetHeartbeatInterval().AsDuration() != 200*time.Millisecond {
				t.Fatalf("session %d: Welcome %v", epoch, w)
			}
			if st := w.GetServerTime().AsTime(); st.Before(before.Add(-time.Second)) || st.After(time.Now().Add(time.Minute)) {
				t.Fatalf("Welcome server time %v, store time at start %v", st, before)
			}
			// The gateway sends heartbeats on its own.
			if fr, err := f.read(); err != nil || fr.GetHeartbeat() == nil {
				t.Fatalf("want a heartbeat, got %v, %v", fr, err)
			}
			got := b.node(t, n.id)
			if got.State != store.NodeReady || got.SessionEpoch != epoch || got.BcdVersion != "v1.2.3" || got.BootID != "boot-a" {
				t.Fatalf("stored node %+v", got)
			}
			if !b.gw.Connected(n.id) || b.metric(t, "bettercompute_gateway_sessions", "") != 1 {
				t.Fatal("the session is not counted as connected")
			}
			f.send(&agentv1.Frame{Kind: &agentv1.Frame_Close{Close: &agentv1.Close{Message: "bye"}}})
			f.wantEnd()
			eventually(t, readTimeout, "the session ends", func() bool { return !b.gw.Connected(n.id) })
		}
		if got := b.metric(t, "bettercompute_gateway_session_closes_total", "node_closed"); got != 3 {
			t.Errorf("closes{node_closed} = %v, want 3", got)
		}
	})
}

func TestSessionRefusals(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		// A frame header announcing more than the limit.
		var huge [4]byte
		binary.BigEndian.PutUint32(huge[:], wire.MaxFrameSize+1)

		tests := []struct {
			name   string
			run    func(t *testing.T) *fakeNode // returns the node to read the Close from
			reason agentv1.CloseReason
			metric string
		}{
			{"wrong node id", func(t *testing.T) *fakeNode {
				return b.open(t, n, &agentv1.Hello{NodeId: "gpu-02"})
			}, agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, refusedNodeMismatch},
			{"unsupported version", func(t *testing.T) *fakeNode {
				return b.open(t, n, &agentv1.Hello{ProtocolVersion: 2})
			}, agentv1.CloseReason_CLOSE_REASON_UNSUPPORTED_VERSION, refusedVersion},
			{"a NUL in Hello's bcd version", func(t *testing.T) *fakeNode {
				return b.open(t, n, &agentv1.Hello{BcdVersion: "v1.0\x00"})
			}, agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, refusedProtocol},
			{"first frame not Hello", func(t *testing.T) *fakeNode {
				c, err := b.dial(t, &n.cert, wire.ALPN)
				if err != nil {
					t.Fatal(err)
				}
				f := &fakeNode{t: t, conn: c}
				f.heartbeat()
				return f
			}, agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, refusedProtocol},
			{"oversized first frame", func(t *testing.T) *fakeNode {
				c, err := b.dial(t, &n.cert, wire.ALPN)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Write(huge[:]); err != nil {
					t.Fatal(err)
				}
				return &fakeNode{t: t, conn: c}
			}, agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, refusedProtocol},
			{"oversized frame in session", func(t *testing.T) *fakeNode {
				f, _ := b.connect(t, n, nil)
				if _, err := f.conn.Write(huge[:]); err != nil {
					t.Fatal(err)
				}
				return f
			}, agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, refusedProtocol},
			{"garbage frame in session", func(t *testing.T) *fakeNode {
				f, _ := b.connect(t, n, nil)
				if _, err := f.conn.Write([]byte{0, 0, 0, 3, 0xff, 0xff, 0xff}); err != nil {
					t.Fatal(err)
				}
				return f
			}, agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, refusedProtocol},
			{"gateway frame from a node", func(t *testing.T) *fakeNode {
				f, _ := b.connect(t, n, nil)
				f.send(&agentv1.Frame{Kind: &agentv1.Frame_Welcome{Welcome: &agentv1.Welcome{}}})
				return f
			}, agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, refusedProtocol},
			{"no client certificate", func(t *testing.T) *fakeNode {
				c, err := b.dial(t, nil, wire.ALPN)
				if err != nil {
					t.Fatal(err)
				}
				return &fakeNode{t: t, conn: c}
			}, agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, refusedNoClientCert},
			{"unknown node", func(t *testing.T) *fakeNode {
				return b.open(t, b.identity(t, b.authority, "never-joined"), nil)
			}, agentv1.CloseReason_CLOSE_REASON_REVOKED, refusedRevoked},
		}
		// Sequential: each reads the refusal counters before and after.
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				before := b.metric(t, "bettercompute_gateway_refusals_total", tc.metric)
				f := tc.run(t)
				f.wantClose(tc.reason)
				eventually(t, readTimeout, "the refusal is counted", func() bool {
					return b.metric(t, "bettercompute_gateway_refusals_total", tc.metric) == before+1
				})
				eventually(t, readTimeout, "no session is left", func() bool { return !b.gw.Connected(n.id) })
			})
		}

		t.Run("certificate from another CA", func(t *testing.T) {
			other, err := pki.LoadOrCreate(t.Context(), storetest.Open(t, store.EngineSQLite), filepath.Join(t.TempDir(), "other.key"), "bc-test")
			if err != nil {
				t.Fatal(err)
			}
			foreign := b.identity(t, other, n.id)
			c, err := b.dial(t, &foreign.cert, wire.ALPN)
			if err == nil {
				// TLS 1.3: the client finishes first; the refusal
				// arrives as an alert on its first read.
				_ = c.SetReadDeadline(time.Now().Add(readTimeout))
				_, err = c.Read(make([]byte, 1))
			}
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("got %v, want a handshake refusal about the certificate", err)
			}
			eventually(t, readTimeout, "foreign_ca is counted", func() bool {
				return b.metric(t, "bettercompute_gateway_refusals_total", refusedForeignCA) == 1
			})
		})
	})
}

func TestSupersede(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		first, w1 := b.connect(t, n, nil)
		second, w2 := b.connect(t, n, nil)
		if w2.GetSessionEpoch() <= w1.GetSessionEpoch() {
			t.Fatalf("epochs %d then %d, want growing", w1.GetSessionEpoch(), w2.GetSessionEpoch())
		}
		first.wantClose(agentv1.CloseReason_CLOSE_REASON_SUPERSEDED)
		eventually(t, readTimeout, "one session counted", func() bool {
			return b.metric(t, "bettercompute_gateway_sessions", "") == 1 &&
				b.metric(t, "bettercompute_gateway_session_closes_total", "superseded") == 1
		})
		if !b.gw.Connected(n.id) {
			t.Fatal("the newer session is not connected")
		}
		second.heartbeat()
		b.gw.Revoke("someone-else") // no session: nothing happens
		if !b.gw.Connected(n.id) {
			t.Fatal("the newer session ended")
		}
	})
}

func TestRevoke(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		f, _ := b.connect(t, n, nil)
		if _, err := b.st.RevokeNode(t.Context(), n.id); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b.gw.Revoke(n.id)
		_ = f.conn.SetReadDeadline(start.Add(time.Second))
		fr, _, err := wire.ReadFrame(f.conn, nil)
		for err == nil && fr.GetHeartbeat() != nil {
			fr, _, err = wire.ReadFrame(f.conn, nil)
		}
		if err != nil || fr.GetClose().GetReason() != agentv1.CloseReason_CLOSE_REASON_REVOKED {
			t.Fatalf("within 1s of Revoke: %v, %v; want Close REVOKED", fr, err)
		}
		if elapsed := time.Since(start); elapsed > time.Second {
			t.Fatalf("Close took %v", elapsed)
		}
		again := b.open(t, n, nil)
		again.wantClose(agentv1.CloseReason_CLOSE_REASON_REVOKED)
		eventually(t, readTimeout, "the refused reconnect is counted", func() bool {
			return b.metric(t, "bettercompute_gateway_refusals_total", refusedRevoked) == 1 &&
				b.metric(t, "bettercompute_gateway_session_closes_total", "revoked") == 1
		})

		// A session that passed the store's check just before the
		// revocation was stored is refused when it registers after
		// Revoke: here, a node Revoke named whose revocation the store
		// does not hold (yet).
		racing := b.newNode(t, "gpu-02")
		b.gw.Revoke(racing.id)
		b.open(t, racing, nil).wantClose(agentv1.CloseReason_CLOSE_REASON_REVOKED)
		if got := b.node(t, racing.id).State; got == store.NodeRevoked {
			t.Fatalf("gpu-02 is %s in the store", got)
		}
	})
}

// TestRevokeElsewhere: a revocation stored by another process (here,
// straight into the store, without Revoke) closes the live session within
// about a second.
func TestRevokeElsewhere(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		f, _ := b.connect(t, n, nil)
		start := time.Now()
		if _, err := b.st.RevokeNode(t.Context(), n.id); err != nil {
			t.Fatal(err)
		}
		_ = f.conn.SetReadDeadline(start.Add(2 * time.Second))
		fr, _, err := wire.ReadFrame(f.conn, nil)
		for err == nil && fr.GetHeartbeat() != nil {
			fr, _, err = wire.ReadFrame(f.conn, nil)
		}
		if err != nil || fr.GetClose().GetReason() != agentv1.CloseReason_CLOSE_REASON_REVOKED {
			t.Fatalf("within 2s of a revocation elsewhere: %v, %v; want Close REVOKED", fr, err)
		}
		t.Logf("closed %v after the revocation was stored", time.Since(start))
	})
}

func TestShutdown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		a, _ := b.connect(t, b.newNode(t, "gpu-01"), nil)
		c, _ := b.connect(t, b.newNode(t, "gpu-02"), nil)
		b.stop()
		a.wantClose(agentv1.CloseReason_CLOSE_REASON_SHUTDOWN)
		c.wantClose(agentv1.CloseReason_CLOSE_REASON_SHUTDOWN)
		select {
		case err := <-b.served:
			b.served <- err // for the cleanup
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(shutdownGrace + time.Second):
			t.Fatal("Serve did not return")
		}
		if _, err := b.dial(t, nil, wire.ALPN); err == nil {
			t.Fatal("the listener still accepts")
		}
	})
}

// TestHTTP joins a node over HTTP/2 on the gateway's listener, without a
// client certificate, then holds a session with the certificate it got.
func TestHTTP(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{join: true})
		id, token, hash := pki.NewJoinToken(b.authority.ServingPin())
		now, err := b.st.Now(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.CreateJoinToken(t.Context(), store.JoinToken{
			ID: id, Tenant: gwTestTenant, SecretHash: hash, MaxUses: 1, Description: "test", ExpiresAt: now.Add(time.Hour),
		}); err != nil {
			t.Fatal(err)
		}
		var proto string
		h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.roots, MinVersion: tls.VersionTLS13}, Protocols: new(http.Protocols)}
		h2.Protocols.SetHTTP2(true)
		defer h2.CloseIdleConnections()
		client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			res, err := h2.RoundTrip(r)
			if err == nil {
				proto = res.Proto
			}
			return res, err
		})}
		join := agentv1connect.NewJoinServiceClient(client, "https://"+b.addr)
		key, csr := keyAndCSR(t)
		res, err := join.Join(t.Context(), connect.NewRequest(&agentv1.JoinRequest{
			Token: token, CsrDer: csr, Facts: &agentv1.HostFacts{Hostname: "gpu-01", MachineId: "0123abcd", BcdVersion: "v0.1.0"},
		}))
		if err != nil {
			t.Fatalf("Join over the gateway: %v", err)
		}
		if proto != "HTTP/2.0" {
			t.Fatalf("served over %q, want HTTP/2.0", proto)
		}
		cert, err := x509.ParseCertificate(res.Msg.GetCertificateDer())
		if err != nil {
			t.Fatal(err)
		}
		n := nodeIdentity{id: res.Msg.GetNodeId(), cert: tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}
		if _, w := b.connect(t, n, nil); w.GetSessionEpoch() != 1 {
			t.Fatalf("Welcome %v", w)
		}

		// HTTP/1.1 reaches the same handlers; unknown paths are 404.
		h1tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.roots, MinVersion: tls.VersionTLS13}}
		defer h1tr.CloseIdleConnections()
		h1 := &http.Client{Transport: h1tr}
		resp, err := h1.Get("https://" + b.addr + "/nothing-here")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.ProtoMajor != 1 {
			t.Fatalf("GET /nothing-here: %s over %s", resp.Status, resp.Proto)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestListenInUse(t *testing.T) {
	t.Parallel()
	st := storetest.Open(t, store.EngineSQLite)
	authority, err := pki.LoadOrCreate(t.Context(), st, filepath.Join(t.TempDir(), "ca.key"), "bc-test")
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	gw, err := New(Config{Store: st, Authority: authority, Listen: taken.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = gw.Listen(context.Background())
	if err == nil || !strings.Contains(err.Error(), "already in use") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Listen on a taken port: %v", err)
	}
	if _, err := New(Config{Store: st, Authority: authority, Listen: "no-port"}); err == nil {
		t.Fatal("New accepted an address without a port")
	}
}
