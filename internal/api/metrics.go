package api

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// metricsInterceptor counts calls and their latency by procedure and code.
type metricsInterceptor struct {
	calls    *prometheus.CounterVec   // procedure, code
	duration *prometheus.HistogramVec // procedure
}

func newMetricsInterceptor(reg prometheus.Registerer) metricsInterceptor {
	m := metricsInterceptor{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bettercompute_api_requests_total",
			Help: "API calls handled, by procedure and result code.",
		}, []string{"procedure", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bettercompute_api_request_duration_seconds",
			Help:    "Time to handle an API call, by procedure.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"procedure"}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.duration)
	}
	return m
}

var _ connect.Interceptor = metricsInterceptor{}

func (m metricsInterceptor) observe(procedure string, start time.Time, err error) {
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
		var ce *connect.Error
		if !errors.As(err, &ce) {
			code = connect.CodeUnknown.String()
		}
	}
	m.calls.WithLabelValues(procedure, code).Inc()
	m.duration.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
}

// WrapUnary measures unary calls.
func (m metricsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		res, err := next(ctx, req)
		m.observe(req.Spec().Procedure, start, err)
		return res, err
	}
}

// WrapStreamingClient leaves client streams alone.
func (m metricsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler measures streaming calls from open to close.
func (m metricsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		m.observe(conn.Spec().Procedure, start, err)
		return err
	}
}
