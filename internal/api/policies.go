package api

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
)

// maxPolicyBytes bounds one policy document: large enough for hundreds of
// statements, small enough that evaluation stays cheap.
const maxPolicyBytes = 64 << 10

// policyService manages a tenant's Cedar policies.
type policyService struct{ base }

var _ apiv1connect.PolicyServiceHandler = (*policyService)(nil)

// problems validates a document and converts what is wrong.
func problems(body string) []*apiv1.PolicyProblem {
	var out []*apiv1.PolicyProblem
	if len(body) > maxPolicyBytes {
		return append(out, &apiv1.PolicyProblem{Message: fmt.Sprintf("the document is %d bytes; the limit is %d", len(body), maxPolicyBytes)})
	}
	for _, p := range iam.ValidatePolicy(body) {
		out = append(out, &apiv1.PolicyProblem{Line: int32(p.Line), Column: int32(p.Column), Message: p.Message})
	}
	return out
}

// problemText puts problems on one line, each with its position.
func problemText(ps []*apiv1.PolicyProblem) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		switch {
		case p.GetLine() > 0 && p.GetColumn() > 0:
			parts[i] = fmt.Sprintf("line %d, column %d: %s", p.GetLine(), p.GetColumn(), p.GetMessage())
		case p.GetLine() > 0:
			parts[i] = fmt.Sprintf("line %d: %s", p.GetLine(), p.GetMessage())
		default:
			parts[i] = p.GetMessage()
		}
	}
	return strings.Join(parts, "; ")
}

func (s *policyService) PutPolicy(ctx context.Context, req *connect.Request[apiv1.PutPolicyRequest]) (*connect.Response[apiv1.PutPolicyResponse], error) {
	m := req.Msg
	tenant := callFrom(ctx).tenant()
	if err := checkName("policy", m.GetName(), false); err != nil {
		return nil, err
	}
	if ps := problems(m.GetBody()); len(ps) > 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("policy %s/%s is not valid: %s", tenant, m.GetName(), problemText(ps)))
	}
	var p store.Policy
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		var err error
		p, err = q.PutPolicy(ctx, store.Policy{Tenant: tenant, Name: m.GetName(), Body: m.GetBody()})
		return notFoundAs(err, typeTenant, tenant, "")
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.PutPolicyResponse{Policy: policyProto(p)}), nil
}

func (s *policyService) GetPolicy(ctx context.Context, req *connect.Request[apiv1.GetPolicyRequest]) (*connect.Response[apiv1.GetPolicyResponse], error) {
	tenant := callFrom(ctx).tenant()
	p, err := s.store.GetPolicy(ctx, tenant, req.Msg.GetName())
	if err != nil {
		return nil, notFoundAs(err, typePolicy, tenant, req.Msg.GetName())
	}
	return connect.NewResponse(&apiv1.GetPolicyResponse{Policy: policyProto(p)}), nil
}

func (s *policyService) ListPolicies(ctx context.Context, _ *connect.Request[apiv1.ListPoliciesRequest]) (*connect.Response[apiv1.ListPoliciesResponse], error) {
	ps, err := s.store.ListPolicies(ctx, callFrom(ctx).tenant())
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListPoliciesResponse{}
	for _, p := range ps {
		res.Policies = append(res.Policies, policyProto(p))
	}
	return connect.NewResponse(res), nil
}

func (s *policyService) DeletePolicy(ctx context.Context, req *connect.Request[apiv1.DeletePolicyRequest]) (*connect.Response[apiv1.DeletePolicyResponse], error) {
	tenant, name := callFrom(ctx).tenant(), req.Msg.GetName()
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		return notFoundAs(q.DeletePolicy(ctx, tenant, name), typePolicy, tenant, name)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.DeletePolicyResponse{}), nil
}

func (s *policyService) ValidatePolicy(_ context.Context, req *connect.Request[apiv1.ValidatePolicyRequest]) (*connect.Response[apiv1.ValidatePolicyResponse], error) {
	return connect.NewResponse(&apiv1.ValidatePolicyResponse{Problems: problems(req.Msg.GetBody())}), nil
}

func (s *policyService) GetSchema(context.Context, *connect.Request[apiv1.GetSchemaRequest]) (*connect.Response[apiv1.GetSchemaResponse], error) {
	return connect.NewResponse(&apiv1.GetSchemaResponse{Schema: iam.Schema()}), nil
}
