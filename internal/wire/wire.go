// Package wire reads and writes the node session's frames: each a protobuf
// agentv1.Frame prefixed by its length as a 4-byte big-endian integer. The
// gateway (server) and bcd (client) share it, so both sides agree on the
// framing, the size limit and the ALPN name by construction.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// ALPN is the TLS application protocol of a node session. The gateway's
// listener also serves HTTP (join, renew) to clients that negotiate h2 or
// http/1.1, and routes by this name.
const ALPN = "bc-session/1"

// MaxFrameSize bounds one frame. The largest frame is a full inventory
// report; a host with a hundred GPUs and disks stays far below this.
const MaxFrameSize = 1 << 20

// ErrFrameTooLarge means a peer announced a frame over the limit; the
// session must close with a protocol error rather than allocate it.
var ErrFrameTooLarge = errors.New("wire: frame exceeds the size limit")

// marshal encodes deterministically, so equal frames are equal bytes.
var marshal = proto.MarshalOptions{Deterministic: true}

// WriteFrame writes f with its length prefix in one Write call, so that
// concurrent writers serialized by the caller never interleave partial
// frames.
func WriteFrame(w io.Writer, f *agentv1.Frame) error {
	size := marshal.Size(f)
	if size > MaxFrameSize {
		return fmt.Errorf("write frame: %d bytes: %w", size, ErrFrameTooLarge)
	}
	buf := make([]byte, 4, 4+size)
	binary.BigEndian.PutUint32(buf, uint32(size))
	buf, err := marshal.MarshalAppend(buf, f)
	if err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// ReadFrame reads one frame. buf, when large enough, is reused for the
// payload; the returned frame does not alias it. An io.EOF before the first
// byte of a frame is returned as is (the peer closed cleanly); a partial
// frame is io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, buf []byte) (*agentv1.Frame, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, buf, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > MaxFrameSize {
		return nil, buf, fmt.Errorf("read frame: %d bytes: %w", size, ErrFrameTooLarge)
	}
	if cap(buf) < int(size) {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, buf, fmt.Errorf("read frame: %w", err)
	}
	f := &agentv1.Frame{}
	if err := proto.Unmarshal(buf, f); err != nil {
		return nil, buf, fmt.Errorf("read frame: %w", err)
	}
	return f, buf, nil
}

// OffStack runs f on a goroutine of its own and waits for it. A session's
// reader lives as long as the session and spends it blocked in a read with
// a shallow stack; the TLS handshake, an inventory report or a store
// transaction grow a goroutine's stack to tens of KiB, and the runtime
// shrinks a stack only at a garbage collection. Doing that work on a
// goroutine that ends keeps every idle reader's stack small, which is most
// of a session's memory with ten thousand of them in one process (the
// gateway, or bcd sim).
func OffStack(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}
