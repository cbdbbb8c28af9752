// Package client is the public Go client of the Better Compute API. It wraps
// the generated Connect clients with what every caller needs: the server's
// base URL, HTTP/2 (also without TLS, on loopback) and the API token.
//
// It depends only on the generated code under gen/, never on internal/.
package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
)

// Client holds one typed client per API service.
type Client struct {
	// System answers what the control plane is and how it runs.
	System apiv1connect.SystemServiceClient
	// Tenants manages tenants: the platform's customers and the platform itself.
	Tenants apiv1connect.TenantServiceClient
	// Users manages the people in a tenant.
	Users apiv1connect.UserServiceClient
	// ServiceAccounts manages a tenant's non-human principals.
	ServiceAccounts apiv1connect.ServiceAccountServiceClient
	// Groups manages groups and their members, which policies grant to.
	Groups apiv1connect.GroupServiceClient
	// Tokens creates, lists and revokes API tokens.
	Tokens apiv1connect.TokenServiceClient
	// Policies manages a tenant's Cedar policies and checks documents
	// against the deployment's schema.
	Policies apiv1connect.PolicyServiceClient
	// Audit reads the audit log of mutating calls and denials.
	Audit apiv1connect.AuditServiceClient
	// Nodes lists, inspects and revokes nodes and sends them commands.
	Nodes apiv1connect.NodeServiceClient
	// JoinTokens manages the tokens nodes join with.
	JoinTokens apiv1connect.JoinTokenServiceClient
	// Pools manages pools of nodes and offers them to tenants.
	Pools apiv1connect.PoolServiceClient
	// Reservations reserves GPUs from pools.
	Reservations apiv1connect.ReservationServiceClient
	// Usage reads metered GPU usage.
	Usage apiv1connect.UsageServiceClient
	// Events lists the event outbox; WatchEvents follows it live.
	Events apiv1connect.EventServiceClient
	// Webhooks manages the endpoints a tenant's events are delivered to.
	Webhooks apiv1connect.WebhookServiceClient

	baseURL string
	http    *http.Client // for the event stream, which is not a Connect call
	token   string
}

// Options tune a Client. The zero value is usable.
type Options struct {
	// Token is the API token sent as a bearer credential; empty sends none.
	Token string
	// TLSConfig verifies an https server; nil uses the system roots.
	TLSConfig *tls.Config
	// Timeout bounds each call; 30s when zero.
	Timeout time.Duration
	// HTTPClient replaces the transport entirely (tests, proxies); Token and
	// Timeout still apply.
	HTTPClient *http.Client
}

// New returns a client for the server at baseURL, such as
// http://127.0.0.1:7400 or https://compute.example.com.
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server address %q is not a URL: use http://HOST:PORT or https://HOST", baseURL)
	}
	base := strings.TrimRight(u.String(), "/")
	hc := opts.HTTPClient
	if hc == nil {
		tr := &http.Transport{
			TLSClientConfig:   opts.TLSConfig,
			ForceAttemptHTTP2: true,
			Protocols:         new(http.Protocols),
		}
		tr.Protocols.SetHTTP1(true)
		tr.Protocols.SetHTTP2(true)
		if u.Scheme == "http" {
			// Speak h2c to a plaintext server, as the control plane does on loopback.
			tr.Protocols.SetUnencryptedHTTP2(true)
			tr.Protocols.SetHTTP1(false)
		}
		hc = &http.Client{Transport: tr}
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	copts := []connect.ClientOption{connect.WithInterceptors(callOptions{token: opts.Token, timeout: timeout})}
	return &Client{
		System:          apiv1connect.NewSystemServiceClient(hc, base, copts...),
		Tenants:         apiv1connect.NewTenantServiceClient(hc, base, copts...),
		Users:           apiv1connect.NewUserServiceClient(hc, base, copts...),
		ServiceAccounts: apiv1connect.NewServiceAccountServiceClient(hc, base, copts...),
		Groups:          apiv1connect.NewGroupServiceClient(hc, base, copts...),
		Tokens:          apiv1connect.NewTokenServiceClient(hc, base, copts...),
		Policies:        apiv1connect.NewPolicyServiceClient(hc, base, copts...),
		Audit:           apiv1connect.NewAuditServiceClient(hc, base, copts...),
		Nodes:           apiv1connect.NewNodeServiceClient(hc, base, copts...),
		JoinTokens:      apiv1connect.NewJoinTokenServiceClient(hc, base, copts...),
		Pools:           apiv1connect.NewPoolServiceClient(hc, base, copts...),
		Reservations:    apiv1connect.NewReservationServiceClient(hc, base, copts...),
		Usage:           apiv1connect.NewUsageServiceClient(hc, base, copts...),
		Events:          apiv1connect.NewEventServiceClient(hc, base, copts...),
		Webhooks:        apiv1connect.NewWebhookServiceClient(hc, base, copts...),
		baseURL:         base,
		http:            hc,
		token:           opts.Token,
	}, nil
}

// BaseURL is the server address the client calls.
func (c *Client) BaseURL() string { return c.baseURL }

// callOptions adds the token and the per-call timeout to every call.
type callOptions struct {
	token   string
	timeout time.Duration
}

// WrapUnary adds the token and the timeout to a unary call.
func (o callOptions) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if o.token != "" {
			req.Header().Set("Authorization", "Bearer "+o.token)
		}
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		return next(ctx, req)
	}
}

// WrapStreamingClient adds the token to a stream; a stream lives as long as
// its context, so the per-call timeout does not apply.
func (o callOptions) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if o.token != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+o.token)
		}
		return conn
	}
}

// WrapStreamingHandler leaves handlers alone: a client only makes calls.
func (o callOptions) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
