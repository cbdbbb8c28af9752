package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// reservationsData is the reservations page's model.
type reservationsData struct {
	Reservations []*apiv1.Reservation
	Pools        []poolChoice
	Models       []string
	Form         reserveForm
	// Error is the API's answer to the last form, shown verbatim.
	Error string
	// AllTenants is true when the list spans tenants (the platform's view).
	AllTenants bool
}

// poolChoice is a pool the caller may reserve from, as a form value
// "tenant/name".
type poolChoice struct {
	Value, Label string
}

// reserveForm is the create form's values, kept when the API refuses them.
type reserveForm struct {
	Pool, Model string
	GPUs, Hours string
	SameNode    bool
}

func (s *server) reservations(w http.ResponseWriter, r *http.Request, sess *session) error {
	return s.showReservations(w, r, sess, http.StatusOK, reserveForm{GPUs: "1", Hours: "1"}, "")
}

// showReservations renders the page with form's values and errMsg, the
// API's message about the last action, if any.
func (s *server) showReservations(w http.ResponseWriter, r *http.Request, sess *session, status int, form reserveForm, errMsg string) error {
	ctx := r.Context()
	d := reservationsData{Form: form, Error: errMsg, AllTenants: sess.platform}
	var err error
	if d.Reservations, err = s.reservationsOf(ctx, sess); err != nil {
		return err
	}
	pools, err := sess.api.Pools.ListPools(ctx, connect.NewRequest(&apiv1.ListPoolsRequest{}))
	if err != nil && connect.CodeOf(err) != connect.CodePermissionDenied {
		return err
	}
	models := map[string]bool{}
	if err == nil {
		for _, p := range pools.Msg.GetPools() {
			free := 0
			for m, n := range p.GetFreeGpus() {
				models[m] = true
				free += int(n)
			}
			d.Pools = append(d.Pools, poolChoice{
				Value: p.GetTenant() + "/" + p.GetName(),
				Label: fmt.Sprintf("%s/%s (%d free)", p.GetTenant(), p.GetName(), free),
			})
		}
	}
	d.Models = sortedKeys(models)
	s.render(w, r, sess, status, "reservations", "Reservations", d)
	return nil
}

func (s *server) createReservation(w http.ResponseWriter, r *http.Request, sess *session) error {
	f := reserveForm{
		Pool: r.PostFormValue("pool"), Model: strings.TrimSpace(r.PostFormValue("model")),
		GPUs: r.PostFormValue("gpus"), Hours: r.PostFormValue("hours"), SameNode: r.PostFormValue("same_node") == "on",
	}
	poolTenant, pool, ok := strings.Cut(f.Pool, "/")
	if !ok {
		pool, poolTenant = f.Pool, ""
	}
	gpus, err := strconv.Atoi(f.GPUs)
	if err != nil {
		return s.showReservations(w, r, sess, http.StatusBadRequest, f, "GPUs must be a whole number.")
	}
	d, err := hours(f.Hours)
	if err != nil {
		return s.showReservations(w, r, sess, http.StatusBadRequest, f, err.Error())
	}
	// The API checks everything else (range, model, policy, capacity) and
	// says what is wrong in one line, which the page shows as it is.
	res, err := sess.api.Reservations.CreateReservation(r.Context(), connect.NewRequest(&apiv1.CreateReservationRequest{
		PoolTenant: poolTenant, Pool: pool, Gpus: int32(gpus), Model: f.Model, SameNode: f.SameNode,
		End: &apiv1.CreateReservationRequest_Duration{Duration: durationpb.New(d)},
	}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			return err
		}
		return s.showReservations(w, r, sess, statusOf(err), f, message(err))
	}
	rv := res.Msg.GetReservation()
	s.redirect(w, r, "/reservations", fmt.Sprintf("Reserved %d GPUs as %s.", rv.GetGpus(), rv.GetId()))
	return nil
}

func (s *server) extendReservation(w http.ResponseWriter, r *http.Request, sess *session) error {
	id := r.PathValue("id")
	d, err := hours(r.PostFormValue("hours"))
	if err != nil {
		return s.showReservations(w, r, sess, http.StatusBadRequest, reserveForm{GPUs: "1", Hours: "1"}, err.Error())
	}
	_, err = sess.api.Reservations.ExtendReservation(r.Context(), connect.NewRequest(&apiv1.ExtendReservationRequest{
		Tenant: r.PostFormValue("tenant"), Id: id, End: &apiv1.ExtendReservationRequest_Duration{Duration: durationpb.New(d)},
	}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			return err
		}
		return s.showReservations(w, r, sess, statusOf(err), reserveForm{GPUs: "1", Hours: "1"}, message(err))
	}
	s.redirect(w, r, "/reservations", fmt.Sprintf("Extended %s: added %s to its end.", id, d))
	return nil
}

func (s *server) releaseReservation(w http.ResponseWriter, r *http.Request, sess *session) error {
	id := r.PathValue("id")
	_, err := sess.api.Reservations.ReleaseReservation(r.Context(), connect.NewRequest(&apiv1.ReleaseReservationRequest{
		Tenant: r.PostFormValue("tenant"), Id: id,
	}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			return err
		}
		return s.showReservations(w, r, sess, statusOf(err), reserveForm{GPUs: "1", Hours: "1"}, message(err))
	}
	s.redirect(w, r, "/reservations", "Released "+id+".")
	return nil
}

// hours parses a form's duration in hours (fractions allowed).
func hours(v string) (time.Duration, error) {
	h, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || h <= 0 || h > 366*24 {
		return 0, fmt.Errorf("the duration %q is not a number of hours from 0.02 (about a minute) to 8784 (366 days)", v)
	}
	return time.Duration(h * float64(time.Hour)).Round(time.Second), nil
}
