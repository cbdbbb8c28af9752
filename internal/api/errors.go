package api

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/better-compute/better-compute/internal/requestid"
	"github.com/better-compute/better-compute/internal/store"
)

// errorBoundary turns what handlers return into errors safe to show. A
// connect.Error from a handler is already meant for the caller and passes
// through; a store sentinel maps to its code; anything else is logged in full
// and answered with a generic message and the request id to quote.
type errorBoundary struct {
	logger *slog.Logger
}

var _ connect.Interceptor = errorBoundary{}

func (b errorBoundary) convert(ctx context.Context, procedure string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, errors.New("not found"))
	case errors.Is(err, store.ErrConflict):
		return connect.NewError(connect.CodeAlreadyExists, errors.New("already exists"))
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("request timed out"))
	}
	id := requestid.From(ctx)
	b.logger.ErrorContext(ctx, "request failed", "procedure", procedure, "request_id", id, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error; the server log has the detail under request id "+id))
}

// WrapUnary converts unary handler errors.
func (b errorBoundary) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, b.convert(ctx, req.Spec().Procedure, err)
	}
}

// WrapStreamingClient leaves client streams alone.
func (b errorBoundary) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler converts streaming handler errors.
func (b errorBoundary) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return b.convert(ctx, conn.Spec().Procedure, next(ctx, conn))
	}
}
