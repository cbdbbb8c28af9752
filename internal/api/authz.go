package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"
)

// authorizer is the one place a call is admitted. It fails closed: a procedure
// that is not in the registry, or that declares no authorization option, is
// denied before its handler runs. Authentication and Cedar policy evaluation
// hook in here (identity issue); until then every declared method is admitted.
type authorizer struct {
	methods map[string]Method // read-only after construction
}

var _ connect.Interceptor = authorizer{}

func (a authorizer) admit(procedure string) (Method, error) {
	m, ok := a.methods[procedure]
	if !ok || m.Authorization == nil || m.Authorization.GetAction() == "" {
		return Method{}, connect.NewError(connect.CodePermissionDenied,
			errors.New("this method declares no authorization and is denied"))
	}
	return m, nil
}

// WrapUnary admits unary calls.
func (a authorizer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		m, err := a.admit(req.Spec().Procedure)
		if err != nil {
			return nil, err
		}
		return next(withMethod(ctx, m), req)
	}
}

// WrapStreamingClient leaves client streams alone: the server only handles.
func (a authorizer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler admits streaming calls the same way as unary ones.
func (a authorizer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		m, err := a.admit(conn.Spec().Procedure)
		if err != nil {
			return err
		}
		return next(withMethod(ctx, m), conn)
	}
}

type methodKey struct{}

func withMethod(ctx context.Context, m Method) context.Context {
	return context.WithValue(ctx, methodKey{}, m)
}

// MethodFrom returns the admitted method of the call ctx belongs to.
func MethodFrom(ctx context.Context) (Method, bool) {
	m, ok := ctx.Value(methodKey{}).(Method)
	return m, ok
}
