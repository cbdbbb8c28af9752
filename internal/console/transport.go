package console

import (
	"bytes"
	"io"
	"net/http"
)

// inProcess is a RoundTripper that hands each request straight to the API
// handler, so that the console's calls pass through the same interceptors
// (authentication, authorization, audit) as any client's, without a socket.
type inProcess struct {
	api http.Handler
}

// RoundTrip serves req with the API handler and returns what it wrote. The
// console only makes unary calls, so buffering the whole answer is fine.
func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recorder{header: http.Header{}}
	// The server side of a request has no GetBody or RequestURI games: give
	// the handler a request shaped as the server would.
	in := req.Clone(req.Context())
	if in.Body == nil {
		in.Body = http.NoBody
	}
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "console"
	t.api.ServeHTTP(rec, in)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return &http.Response{
		Status:        http.StatusText(rec.code),
		StatusCode:    rec.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.header,
		Body:          io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		ContentLength: int64(rec.body.Len()),
		Request:       req,
	}, nil
}

// recorder is the ResponseWriter the API writes into.
type recorder struct {
	header http.Header
	code   int // 0 until WriteHeader or Write
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// Flush lets handlers that flush (streams) write into the buffer.
func (r *recorder) Flush() {}
