package iam_test

import (
	"slices"
	"testing"

	"github.com/better-compute/better-compute/internal/api"
	"github.com/better-compute/better-compute/internal/iam"
)

// TestSchemaCoversEveryMethod: the proto files are the registry of methods
// and of the permission each needs; the schema must know every action they
// declare, for the resource type they declare. Adding a method without
// extending the schema fails here.
func TestSchemaCoversEveryMethod(t *testing.T) {
	t.Parallel()
	methods, err := api.LoadMethods()
	if err != nil {
		t.Fatal(err)
	}
	for _, proc := range api.SortedProcedures(methods) {
		m := methods[proc]
		t.Run(proc, func(t *testing.T) {
			t.Parallel()
			a := m.Authorization
			if a == nil || a.GetAction() == "" {
				t.Fatalf("%s declares no authorization option", proc)
			}
			principals, resources, ok := iam.ActionAppliesTo(a.GetAction())
			if !ok {
				t.Fatalf("%s: action %q is not in the schema (internal/iam/schema.cedarschema)", proc, a.GetAction())
			}
			if !slices.Contains(resources, a.GetResource()) {
				t.Errorf("%s: action %q applies to resources %v in the schema, not to the declared %q", proc, a.GetAction(), resources, a.GetResource())
			}
			if !slices.Equal(principals, []string{"ServiceAccount", "User"}) {
				t.Errorf("%s: action %q applies to principals %v, want User and ServiceAccount", proc, a.GetAction(), principals)
			}
		})
	}
}
