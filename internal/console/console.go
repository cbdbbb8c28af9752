// Package console serves the web console: server-rendered pages under / that
// show and change what the API holds. Every page calls the API in process,
// through the public Go client and with the signed-in user's own token, so
// the console can do exactly what that user's CLI can, and nothing more: it
// holds no privileges of its own.
package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// Cookie names. The session cookie holds the API token verbatim: the
// console keeps no session state, so any server process sharing the store
// serves any signed-in user, and revoking the token ends the session.
const (
	sessionCookie = "bc_session"
	flashCookie   = "bc_flash"
)

// apiBase is the client's base URL; calls never leave the process, so the
// host only has to parse.
const apiBase = "http://console.internal"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config is what the console needs from the server that mounts it.
type Config struct {
	// API serves the Connect API; the console calls it in process. Required.
	API http.Handler
	// Logger receives failures the console cannot show; nil discards them.
	Logger *slog.Logger
	// Secure marks the session cookie Secure: set it when served over TLS.
	Secure bool
}

// server holds the console's state: none per user.
type server struct {
	api     http.Handler
	logger  *slog.Logger
	secure  bool
	csrfKey []byte // per process: a restart invalidates open forms, not sessions
	pages   map[string]*pageTemplate

	mu  sync.Mutex            // guards ids
	ids map[[32]byte]identity // by the token's SHA-256
}

// Mount registers the console's routes on mux. It claims / (exactly), a few
// page paths and /static/; the API's paths, /v1/, the probes, /metrics and
// /downloads/ stay with their owners.
func Mount(mux *http.ServeMux, cfg Config) (err error) {
	if cfg.API == nil {
		return errors.New("console: no API handler to call")
	}
	s := &server{api: cfg.API, logger: cfg.Logger, secure: cfg.Secure, csrfKey: make([]byte, 32), ids: map[[32]byte]identity{}}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if _, err := rand.Read(s.csrfKey); err != nil {
		return fmt.Errorf("console: CSRF key: %w", err)
	}
	if s.pages, err = parsePages(); err != nil {
		return err
	}
	// ServeMux panics on a pattern that conflicts with one already there;
	// that is a wiring mistake the caller should see as an error.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("console: mount: %v", p)
		}
	}()
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return err
	}
	mux.Handle("GET /static/", http.StripPrefix("/static/", cacheFor(time.Hour, http.FileServerFS(static))))
	mux.HandleFunc("GET /sign-in", s.signInForm)
	mux.HandleFunc("POST /sign-in", s.signIn)
	mux.HandleFunc("POST /sign-out", s.signOut)
	for pattern, h := range map[string]handler{
		"GET /{$}":                        s.overview,
		"GET /nodes":                      s.nodes,
		"GET /nodes/{id}":                 s.node,
		"GET /reservations":               s.reservations,
		"POST /reservations":              s.createReservation,
		"POST /reservations/{id}/extend":  s.extendReservation,
		"POST /reservations/{id}/release": s.releaseReservation,
		"GET /pools":                      s.pools,
		"POST /join-tokens":               s.createJoinToken,
		"GET /usage":                      s.usage,
		"GET /usage.csv":                  s.usageCSV,
		"GET /audit":                      s.audit,
	} {
		mux.Handle(pattern, s.authed(h))
	}
	return nil
}

// cacheFor lets browsers keep the embedded assets for d.
func cacheFor(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(d.Seconds())))
		h.ServeHTTP(w, r)
	})
}

// session is a signed-in request: its token, a client calling with it, and
// what the console learned of the caller.
type session struct {
	token string
	api   *client.Client
	csrf  string
	// tenant is the caller's tenant, when the API let the console see it.
	tenant string
	// platform is true for a principal of the platform tenant, which sees
	// every tenant.
	platform bool
	// flash is a one-line message carried over a redirect.
	flash string
}

// handler serves one signed-in request. An error it returns is shown as a
// page, or, for an unauthenticated one, sends the user to sign in.
type handler func(w http.ResponseWriter, r *http.Request, s *session) error

// clientFor returns a client that calls the API in process with token.
func (s *server) clientFor(token string) *client.Client {
	c, err := client.New(apiBase, client.Options{Token: token, HTTPClient: &http.Client{Transport: inProcess{api: s.api}}})
	if err != nil {
		panic(err) // apiBase is a constant that parses
	}
	return c
}

// csrfFor is the form token of a session: an HMAC of its API token under
// the process's key, so a page from another site cannot forge it.
func (s *server) csrfFor(token string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte("csrf\x00" + token))
	return hex.EncodeToString(m.Sum(nil))
}

// authed admits a request with a session cookie, checks the CSRF token of a
// form post, and turns the handler's errors into pages.
func (s *server) authed(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		c, err := r.Cookie(sessionCookie)
		if err != nil || c.Value == "" {
			http.Redirect(w, r, "/sign-in", http.StatusSeeOther)
			return
		}
		sess := &session{token: c.Value, api: s.clientFor(c.Value), csrf: s.csrfFor(c.Value)}
		if r.Method == http.MethodPost {
			if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(sess.csrf)) {
				s.renderError(w, r, sess, http.StatusForbidden, "This form expired or did not come from this console. Reload the page and try again.")
				return
			}
		}
		if f, err := r.Cookie(flashCookie); err == nil {
			sess.flash, _ = url.QueryUnescape(f.Value)
			http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
		}
		// An unknown identity only hides the platform's extras; an
		// unauthenticated one ends the session.
		err = s.identify(r, sess)
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			err = h(w, r, sess)
		}
		if err == nil {
			return
		}
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			s.clearSession(w)
			http.Redirect(w, r, "/sign-in?why=expired", http.StatusSeeOther)
			return
		}
		s.renderError(w, r, sess, statusOf(err), message(err))
	})
}

// identityTTL bounds how long the console trusts what it learned of a
// token's principal; it only decides what the layout shows, never access.
const identityTTL = 5 * time.Minute

// identity is what the console learned of a token's principal.
type identity struct {
	tenant   string
	platform bool
	learned  time.Time
}

// deniedCaller reads the caller from a denial, which names it first:
// `User::"acme/alice" may not ...`.
var deniedCaller = regexp.MustCompile(`^[A-Za-z]+::"([a-z0-9-]+)/[^"]*" may not `)

// identify learns the caller's tenant from the tenants it may list: the
// platform sees the platform tenant among all, anyone else only its own.
// A principal that may not list tenants is named by the denial. The answer
// is cached per token, so that pages do not each ask (and each leave a
// denial in the audit log).
func (s *server) identify(r *http.Request, sess *session) error {
	key := sha256.Sum256([]byte(sess.token))
	s.mu.Lock()
	id, ok := s.ids[key]
	s.mu.Unlock()
	if ok && time.Since(id.learned) < identityTTL {
		sess.tenant, sess.platform = id.tenant, id.platform
		return nil
	}
	id = identity{learned: time.Now()}
	res, err := sess.api.Tenants.ListTenants(r.Context(), connect.NewRequest(&apiv1.ListTenantsRequest{}))
	switch {
	case err == nil:
		for _, t := range res.Msg.GetTenants() {
			if t.GetPlatform() {
				id.tenant, id.platform = t.GetName(), true
			}
		}
		if ts := res.Msg.GetTenants(); !id.platform && len(ts) == 1 {
			id.tenant = ts[0].GetName()
		}
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		if m := deniedCaller.FindStringSubmatch(message(err)); m != nil {
			id.tenant = m[1]
		}
	default:
		return err
	}
	s.mu.Lock()
	if len(s.ids) >= maxIdentities {
		clear(s.ids) // a crude bound: relearning costs one call per user
	}
	s.ids[key] = id
	s.mu.Unlock()
	sess.tenant, sess.platform = id.tenant, id.platform
	return nil
}

// maxIdentities bounds the identity cache.
const maxIdentities = 10000

// redirect ends a successful form post: the browser gets the page again by
// GET (so a reload does not repeat the post) with msg shown once.
func (s *server) redirect(w http.ResponseWriter, r *http.Request, to, msg string) {
	if msg != "" {
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 60, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (s *server) clearSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
}

// message is an API error's one line, as the API wrote it, for showing.
func message(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		if ce.Code() == connect.CodeInternal || ce.Code() == connect.CodeUnknown {
			return "The server failed to answer; the request id in its logs tells why."
		}
		return ce.Message()
	}
	return err.Error()
}

// statusOf maps an API error to the HTTP status of the page that shows it.
func statusOf(err error) int {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange, connect.CodeAlreadyExists:
		return http.StatusBadRequest
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeResourceExhausted:
		return http.StatusConflict
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Sign-in.

// signInData is the sign-in page's model.
type signInData struct {
	Error string
}

func (s *server) signInForm(w http.ResponseWriter, r *http.Request) {
	var d signInData
	if r.URL.Query().Get("why") == "expired" {
		d.Error = "Your session ended: the API no longer accepts its token (expired, revoked or unknown). Sign in again."
	}
	s.render(w, r, nil, http.StatusOK, "sign-in", "Sign in", d)
}

func (s *server) signIn(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		s.render(w, r, nil, http.StatusBadRequest, "sign-in", "Sign in", signInData{Error: "Give an API token (bc_...)."})
		return
	}
	// Any answer but unauthenticated proves the token: a user who may not
	// list tenants is still signed in.
	_, err := s.clientFor(token).Tenants.ListTenants(r.Context(), connect.NewRequest(&apiv1.ListTenantsRequest{}))
	if connect.CodeOf(err) == connect.CodeUnauthenticated {
		s.render(w, r, nil, http.StatusUnauthorized, "sign-in", "Sign in", signInData{Error: "The API refused this token: " + message(err)})
		return
	}
	if err != nil && connect.CodeOf(err) != connect.CodePermissionDenied {
		s.render(w, r, nil, statusOf(err), "sign-in", "Sign in", signInData{Error: message(err)})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: token, Path: "/", HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *server) signOut(w http.ResponseWriter, r *http.Request) {
	// Signing out is harmless, but only this console's forms may do it.
	c, err := r.Cookie(sessionCookie)
	if err == nil && !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.csrfFor(c.Value))) {
		http.Error(w, "this form did not come from this console", http.StatusForbidden)
		return
	}
	s.clearSession(w)
	http.Redirect(w, r, "/sign-in", http.StatusSeeOther)
}
