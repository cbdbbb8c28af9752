package iam

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/better-compute/better-compute/examples/policies"
)

// The policies the server installs by itself are the shipped examples, read
// from the same embedded files, so the two can never drift apart. An example
// is written for the tenant acme; a header comment (up to the first blank
// line) says how to install it by hand and is left out of what the server
// installs.

// exampleTenant is the tenant the examples are written for.
const exampleTenant = "acme"

// exampleRef matches a string literal naming the example tenant or
// something in it: "acme", "acme/admins".
var exampleRef = regexp.MustCompile(`"` + exampleTenant + `(/[^"\\]*)?"`)

// ExamplePolicy returns the body of the example policy name (the file
// examples/policies/NAME.cedar without its header) for tenant: every string
// literal that names acme or something in it names tenant instead.
func ExamplePolicy(name, tenant string) (string, error) {
	b, err := policies.Files.ReadFile(name + ".cedar")
	if err != nil {
		return "", fmt.Errorf("iam: no example policy %q: %w", name, err)
	}
	body := stripHeader(string(b))
	if tenant == exampleTenant {
		return body, nil
	}
	return exampleRef.ReplaceAllStringFunc(body, func(lit string) string {
		rest := strings.TrimSuffix(strings.TrimPrefix(lit, `"`+exampleTenant), `"`)
		return string(types.String(tenant + rest).MarshalCedar())
	}), nil
}

// stripHeader drops the leading comment block and the blank lines after it.
func stripHeader(doc string) string {
	rest := doc
	for strings.HasPrefix(rest, "//") {
		_, rest, _ = strings.Cut(rest, "\n")
	}
	return strings.TrimLeft(rest, "\n")
}

// mustExample is ExamplePolicy for the examples the binary depends on; a
// missing one is a build defect that every test catches.
func mustExample(name, tenant string) string {
	body, err := ExamplePolicy(name, tenant)
	if err != nil {
		panic(err)
	}
	return body
}

// TenantAdminsPolicy returns the tenant-admins document for tenant: the
// members of Group::"<tenant>/admins" may do everything inside
// Tenant::"<tenant>". The API installs it with every tenant it creates.
func TenantAdminsPolicy(tenant string) string { return mustExample("tenant-admins", tenant) }

// PlatformAdminsPolicy returns the platform-admins document: the members of
// Group::"platform/admins" may do everything. It belongs in the platform
// tenant, which must be named "platform".
func PlatformAdminsPolicy() string { return mustExample("platform-admins", exampleTenant) }
