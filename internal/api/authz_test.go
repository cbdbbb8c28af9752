package api

import (
	"testing"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func TestAuthorizerFailsClosed(t *testing.T) {
	t.Parallel()
	const declared, undeclared, empty = "/p.S/Declared", "/p.S/Undeclared", "/p.S/Empty"
	a := authorizer{methods: map[string]Method{
		declared:   {Procedure: declared, Authorization: &apiv1.Authorization{Action: "compute:system:read", Resource: "System"}},
		undeclared: {Procedure: undeclared},
		empty:      {Procedure: empty, Authorization: &apiv1.Authorization{}},
	}}
	if m, err := a.admit(declared); err != nil || m.Procedure != declared {
		t.Errorf("declared method: %v, %v", m, err)
	}
	for _, p := range []string{undeclared, empty, "/p.S/Unknown"} {
		if _, err := a.admit(p); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s: err = %v, want permission_denied", p, err)
		}
	}
}
