package api

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// TestCheckRequest: what no handler should see is refused naming the
// field, wherever in the request it is: a nested message, a list, a map's
// key or value; and what is fine passes.
func TestCheckRequest(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		msg  proto.Message
		want string // "" for accepted
	}{
		{"fine", &apiv1.CreateGroupRequest{Tenant: "acme", Name: "ops", Description: "on call"}, ""},
		{"a NUL in a name", &apiv1.GetGroupRequest{Tenant: "acme", Name: "ops\x00"}, "name holds a NUL byte"},
		{"a long id", &apiv1.GetGroupRequest{Tenant: "acme", Name: strings.Repeat("g", maxRequestString+1)}, "name is 4097 bytes long; the limit is 4096"},
		{"a policy body up to its own limit", &apiv1.PutPolicyRequest{Tenant: "acme", Name: "p", Body: strings.Repeat(" ", maxPolicyBytes)}, ""},
		{"a policy body past it", &apiv1.PutPolicyRequest{Tenant: "acme", Name: "p", Body: strings.Repeat(" ", maxPolicyBytes+1)}, "body is 65537 bytes long"},
		{"a long idempotency key", &apiv1.CreateReservationRequest{Pool: "gpu", Gpus: 1, IdempotencyKey: strings.Repeat("k", 129)}, "idempotency_key is 129 bytes long; the limit is 128"},
		{"a NUL in a map value", &apiv1.LabelNodeRequest{Id: "n1", Set: map[string]string{"rack": "a\x00"}}, `set["rack"] holds a NUL byte`},
		{"a NUL in a map key", &apiv1.LabelNodeRequest{Id: "n1", Set: map[string]string{"r\x00": "a"}}, `set key "r\x00" holds a NUL byte`},
		{"a NUL in a list", &apiv1.CreateWebhookRequest{Url: "https://example.com/", Events: []string{"node.ready", "x\x00"}}, "events[1] holds a NUL byte"},
		{"a time past year 9999", &apiv1.ListAuditEventsRequest{StartTime: &timestamppb.Timestamp{Seconds: 1e13}}, "start_time is not a time between the years 1 and 9999"},
		{"a time before year 1", &apiv1.ListAuditEventsRequest{EndTime: &timestamppb.Timestamp{Seconds: -1e13}}, "end_time is not a time"},
		{"a fine time", &apiv1.ListAuditEventsRequest{StartTime: timestamppb.Now()}, ""},
		{"a duration past 10,000 years", &apiv1.CreateReservationRequest{Pool: "gpu", Gpus: 1, End: &apiv1.CreateReservationRequest_Duration{Duration: &durationpb.Duration{Seconds: 1e12}}}, "duration is not a valid duration"},
	} {
		err := checkRequest(tt.msg.ProtoReflect())
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error holding %q", tt.name, err, tt.want)
		}
	}
}
