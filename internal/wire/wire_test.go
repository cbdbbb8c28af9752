package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	frames := []*agentv1.Frame{
		{Kind: &agentv1.Frame_Hello{Hello: &agentv1.Hello{NodeId: "n1", ProtocolVersion: agentv1.ProtocolVersion_PROTOCOL_VERSION_1}}},
		{Kind: &agentv1.Frame_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 7}}},
		{},
	}
	var b bytes.Buffer
	for _, f := range frames {
		if err := WriteFrame(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	var buf []byte
	for i, want := range frames {
		got, nbuf, err := ReadFrame(&b, buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		buf = nbuf
		if !proto.Equal(got, want) {
			t.Errorf("frame %d = %v, want %v", i, got, want)
		}
	}
	if _, _, err := ReadFrame(&b, buf); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadRefuses(t *testing.T) {
	t.Parallel()
	var huge [4]byte
	binary.BigEndian.PutUint32(huge[:], MaxFrameSize+1)
	tests := map[string]struct {
		in   []byte
		want error
	}{
		"too large":        {huge[:], ErrFrameTooLarge},
		"truncated header": {[]byte{0, 0}, io.ErrUnexpectedEOF},
		"truncated body":   {[]byte{0, 0, 0, 9, 1, 2}, io.ErrUnexpectedEOF},
	}
	for name, tt := range tests {
		if _, _, err := ReadFrame(bytes.NewReader(tt.in), nil); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", name, err, tt.want)
		}
	}
	if _, _, err := ReadFrame(bytes.NewReader([]byte{0, 0, 0, 2, 0xff, 0xff}), nil); err == nil {
		t.Error("garbage payload accepted")
	}
}

func FuzzReadFrame(f *testing.F) {
	var b bytes.Buffer
	_ = WriteFrame(&b, &agentv1.Frame{Kind: &agentv1.Frame_Hello{Hello: &agentv1.Hello{NodeId: "n"}}})
	f.Add(b.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, _, err := ReadFrame(bytes.NewReader(in), nil)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteFrame(&out, fr); err != nil {
			t.Fatalf("a frame that was read cannot be written: %v", err)
		}
	})
}
