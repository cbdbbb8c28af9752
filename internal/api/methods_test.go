package api

import (
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// actionPattern is the shape every declared action must have.
var actionPattern = regexp.MustCompile(`^compute:[a-z][a-z-]*:[a-z][a-z-]*$`)

// TestEveryMethodDeclaresAuthorization is the registry check: a method added
// to the API without its authorization option fails here, before the server
// would deny it at run time.
func TestEveryMethodDeclaresAuthorization(t *testing.T) {
	t.Parallel()
	methods, err := LoadMethods()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range SortedProcedures(methods) {
		m := methods[p]
		a := m.Authorization
		switch {
		case a == nil:
			t.Errorf("%s declares no (bettercompute.api.v1.authorization) option", p)
		case !actionPattern.MatchString(a.GetAction()):
			t.Errorf("%s: action %q is not compute:<group>:<verb>", p, a.GetAction())
		case a.GetResource() == "":
			t.Errorf("%s: no resource type", p)
		case a.GetResourceIdField() != "" && m.Descriptor.Input().Fields().ByName(protoName(a.GetResourceIdField())) == nil:
			t.Errorf("%s: resource_id_field %q is not a field of %s", p, a.GetResourceIdField(), m.Descriptor.Input().FullName())
		}
	}
}

func protoName(s string) protoreflect.Name { return protoreflect.Name(strings.TrimSpace(s)) }
