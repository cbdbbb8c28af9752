package gateway

import (
	"net"
	"sync"
)

// connListener is a net.Listener fed by the gateway's accept loop: the
// connections that negotiated HTTP rather than the session protocol, their
// TLS handshake done. http.Server.Serve accepts from it.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{} // closed by Close
	once  sync.Once     // guards closing done
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to Accept; false when the listener is closed (the caller
// then closes c).
func (l *connListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the next delivered connection, or net.ErrClosed.
func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and deliver return; it does not close the gateway's
// real listener.
func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the gateway's address.
func (l *connListener) Addr() net.Addr { return l.addr }
