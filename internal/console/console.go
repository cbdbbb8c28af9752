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
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// Cookie names. The session cookie holds the API token verbatim: the
// console keeps no session state, so any server process sharing the store
// serves any signed-in user, and revoking the token ends the session.
// The sign-in cookie holds a random value made when the sign-in form is
// shown; the form carries its HMAC, so only a form this console gave this
// browser can sign it in (no signing a victim in as the attacker).
const (
	sessionCookie = "bc_session"
	flashCookie   = "bc_flash"
	signInCookie  = "bc_signin"
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
	// Secure marks the session cookie Secure: set it when the browser reaches
	// the console over HTTPS (served with TLS, or behind a TLS proxy).
	Secure bool
	// CSRFKey signs the sign-in nonce and the forms' tokens. Every process
	// serving the console over one store must have the same key (serve
	// derives it from the deployment's key file), so that a form one
	// renders, another accepts; nil makes a random key of this process's.
	CSRFKey []byte
}

// server holds the console's state: none per user.
type server struct {
	api     http.Handler
	logger  *slog.Logger
	secure  bool
	csrfKey []byte // Config.CSRFKey, or this process's own
	pages   map[string]*pageTemplate
}

// Mount registers the console's routes on mux. It claims / (exactly), a few
// page paths and /static/; the API's paths, /v1/, the probes, /metrics and
// /downloads/ stay with their owners.
func Mount(mux *http.ServeMux, cfg Config) (err error) {
	if cfg.API == nil {
		return errors.New("console: no API handler to call")
	}
	s := &server{api: cfg.API, logger: cfg.Logger, secure: cfg.Secure, csrfKey: cfg.CSRFKey}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if len(s.csrfKey) == 0 {
		s.csrfKey = make([]byte, 32)
		if _, err := rand.Read(s.csrfKey); err != nil {
			return fmt.Errorf("console: CSRF key: %w", err)
		}
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
		"GET /tenants":                    s.tenants,
		"POST /tenants":                   s.createTenant,
		"POST /tenants/update":            s.updateTenant,
		"POST /tenants/delete":            s.deleteTenant,
		"GET /principals":                 s.principals,
		"POST /principals":                s.createPrincipal,
		"POST /principals/update":         s.updatePrincipal,
		"POST /principals/delete":         s.deletePrincipal,
		"POST /tokens":                    s.createToken,
		"POST /tokens/revoke":             s.revokeToken,
		"GET /groups":                     s.groups,
		"POST /groups":                    s.createGroup,
		"POST /groups/update":             s.updateGroup,
		"POST /groups/delete":             s.deleteGroup,
		"POST /groups/members":            s.changeMember,
		"GET /policies":                   s.policies,
		"GET /policies/edit":              s.policyEditor,
		"POST /policies/edit":             s.savePolicy,
		"POST /policies/delete":           s.deletePolicy,
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
	// principal is the caller as a Cedar entity, User::"acme/alice".
	principal string
	// tenant is the caller's tenant.
	tenant string
	// platform is true for a principal of the platform tenant, which sees
	// every tenant.
	platform bool
	// may holds the actions of adminActions, formActions and
	// overviewActions the policies permit the caller, as WhoAmI answered:
	// it decides which admin pages the nav offers, which of their forms
	// show, and what the overview reads. The API still decides every call.
	may map[string]bool
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
		err = s.identify(r, sess)
		if err == nil {
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

// adminActions are the actions whose permission opens an admin page: the
// console asks WhoAmI which of them the caller may perform.
var adminActions = []string{actTenantsList, actUsersList, actServiceAccountsList, actGroupsList, actPoliciesList}

const (
	actTenantsList         = "compute:tenants:list"
	actUsersList           = "compute:users:list"
	actServiceAccountsList = "compute:service-accounts:list"
	actGroupsList          = "compute:groups:list"
	actPoliciesList        = "compute:policies:list"

	actTenantsUpdate         = "compute:tenants:update"
	actTenantsDelete         = "compute:tenants:delete"
	actUsersCreate           = "compute:users:create"
	actServiceAccountsCreate = "compute:service-accounts:create"
	actGroupsCreate          = "compute:groups:create"

	actNodesList        = "compute:nodes:list"
	actPoolsList        = "compute:pools:list"
	actReservationsList = "compute:reservations:list"
	actUsageList        = "compute:usage:list"
)

// formActions are the actions whose permission shows an admin page's
// forms, so that a viewer is offered no button the API would only refuse.
// WhoAmI answers for actions on the caller's own tenant or the deployment,
// not on one group or principal: whoever may create a tenant's groups is
// taken to be whom the policies let edit and delete them, whoever may
// create its users (or service accounts) whom they let edit those, and
// tenants:update and tenants:delete are asked of the caller's own tenant.
// The API still decides every post.
var formActions = []string{actTenantsUpdate, actTenantsDelete, actUsersCreate, actServiceAccountsCreate, actGroupsCreate}

// overviewActions are the lists the overview reads: it reads only those
// WhoAmI says the caller may, rather than collect a denial (and a deny
// audit event) for each of the others on every page view.
var overviewActions = []string{actNodesList, actPoolsList, actReservationsList, actUsageList}

// identify asks the API who the caller is and which admin pages it may use.
// Every authenticated caller may ask, it writes no audit event, and it
// costs what authenticating costs, so every page asks afresh: a changed
// policy shows on the next page.
func (s *server) identify(r *http.Request, sess *session) error {
	res, err := sess.api.System.WhoAmI(r.Context(), connect.NewRequest(&apiv1.WhoAmIRequest{Actions: slices.Concat(adminActions, formActions, overviewActions)}))
	if err != nil {
		return err
	}
	me := res.Msg
	sess.principal = fmt.Sprintf("%s::%q", me.GetPrincipalType(), me.GetTenant()+"/"+me.GetName())
	sess.tenant, sess.platform = me.GetTenant(), me.GetPlatform()
	sess.may = map[string]bool{}
	for _, a := range me.GetPermittedActions() {
		sess.may[a] = true
	}
	return nil
}

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
	// CSRF is the form's token, bound to the sign-in cookie.
	CSRF string
}

// signInCSRF is the sign-in form's token for the sign-in cookie's value.
func (s *server) signInCSRF(nonce string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte("sign-in\x00" + nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// showSignIn renders the sign-in form with a fresh sign-in cookie, so that
// every form shown can be posted once the user has a token to paste.
func (s *server) showSignIn(w http.ResponseWriter, r *http.Request, status int, msg string) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		http.Error(w, "the console could not make a sign-in form", http.StatusInternalServerError)
		return
	}
	v := hex.EncodeToString(nonce)
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: v, Path: "/sign-in", MaxAge: 3600, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
	s.render(w, r, nil, status, "sign-in", "Sign in", signInData{Error: msg, CSRF: s.signInCSRF(v)})
}

func (s *server) signInForm(w http.ResponseWriter, r *http.Request) {
	var msg string
	if r.URL.Query().Get("why") == "expired" {
		msg = "Your session ended: the API no longer accepts its token (expired, revoked or unknown). Sign in again."
	}
	s.showSignIn(w, r, http.StatusOK, msg)
}

func (s *server) signIn(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(signInCookie)
	if err != nil || c.Value == "" || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.signInCSRF(c.Value))) {
		s.showSignIn(w, r, http.StatusForbidden, "This sign-in form expired or did not come from this console. Sign in again.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		s.showSignIn(w, r, http.StatusBadRequest, "Give an API token (bc_...).")
		return
	}
	// WhoAmI answers every valid token, whatever the policies say, and
	// records nothing: the check proves the token and nothing more.
	_, err = s.clientFor(token).System.WhoAmI(r.Context(), connect.NewRequest(&apiv1.WhoAmIRequest{}))
	switch {
	case connect.CodeOf(err) == connect.CodeUnauthenticated:
		s.showSignIn(w, r, http.StatusUnauthorized, "The API refused this token: "+message(err))
		return
	case err != nil:
		s.showSignIn(w, r, statusOf(err), message(err))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Path: "/sign-in", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
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
