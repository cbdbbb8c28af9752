package console

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// poolsData is the pools page's model.
type poolsData struct {
	Pools      []*apiv1.Pool
	JoinTokens []*apiv1.JoinToken
	// JoinTokensHidden is why join tokens are not shown, if they are not.
	JoinTokensHidden string
	// Created is a join token made by the last form, shown once.
	Created *createdToken
	Error   string
}

// createdToken is a new join token's secret and the command that joins a
// node with it.
type createdToken struct {
	ID, Secret, Command string
}

func (s *server) pools(w http.ResponseWriter, r *http.Request, sess *session) error {
	return s.showPools(w, r, sess, http.StatusOK, nil, "")
}

func (s *server) showPools(w http.ResponseWriter, r *http.Request, sess *session, status int, created *createdToken, errMsg string) error {
	ctx := r.Context()
	d := poolsData{Created: created, Error: errMsg}
	pools, err := sess.api.Pools.ListPools(ctx, connect.NewRequest(&apiv1.ListPoolsRequest{}))
	if err != nil {
		return err
	}
	d.Pools = pools.Msg.GetPools()
	jts, err := sess.api.JoinTokens.ListJoinTokens(ctx, connect.NewRequest(&apiv1.ListJoinTokensRequest{}))
	switch {
	case err == nil:
		d.JoinTokens = jts.Msg.GetJoinTokens()
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		d.JoinTokensHidden = message(err)
	default:
		return err
	}
	s.render(w, r, sess, status, "pools", "Pools", d)
	return nil
}

func (s *server) createJoinToken(w http.ResponseWriter, r *http.Request, sess *session) error {
	uses, err := strconv.Atoi(orDefault(r.PostFormValue("max_uses"), "1"))
	if err != nil {
		return s.showPools(w, r, sess, http.StatusBadRequest, nil, "Uses must be a whole number.")
	}
	ttl, err := hours(r.PostFormValue("hours"))
	if err != nil {
		return s.showPools(w, r, sess, http.StatusBadRequest, nil, err.Error())
	}
	labels := map[string]string{}
	for _, kv := range strings.FieldsFunc(r.PostFormValue("labels"), func(c rune) bool { return c == ',' || c == ' ' }) {
		k, v, _ := strings.Cut(kv, "=")
		labels[k] = v
	}
	res, err := sess.api.JoinTokens.CreateJoinToken(r.Context(), connect.NewRequest(&apiv1.CreateJoinTokenRequest{
		Pool: r.PostFormValue("pool"), MaxUses: int32(uses), Ttl: durationpb.New(ttl.Round(time.Second)),
		Labels: labels, Description: strings.TrimSpace(r.PostFormValue("description")),
	}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			return err
		}
		return s.showPools(w, r, sess, statusOf(err), nil, message(err))
	}
	// The secret is shown only now, in this answer: never in a redirect's
	// cookie or URL.
	c := &createdToken{ID: res.Msg.GetJoinToken().GetId(), Secret: res.Msg.GetSecret()}
	// In the environment, not an argument, which other users of the host
	// could read in the process list while bcd joins.
	c.Command = "BCD_JOIN_TOKEN=" + c.Secret + " bcd join --server " + res.Msg.GetGatewayUrl()
	return s.showPools(w, r, sess, http.StatusOK, c, "")
}

func orDefault(v, def string) string {
	if strings.TrimSpace(v) == "" {
		return def
	}
	return strings.TrimSpace(v)
}
