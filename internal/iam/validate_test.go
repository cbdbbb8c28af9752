package iam_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/iam"
)

func TestValidatePolicy(t *testing.T) {
	t.Parallel()
	const create = `Action::"compute:reservations:create"`
	tests := []struct {
		name string
		body string
		// want is one "line:column:substring" per problem; nil means valid.
		want []string
	}{
		{"empty document", "", nil},
		{"only comments", "// nothing yet\n/* really */\n", nil},
		{"tenant admins", iam.TenantAdminsPolicy("acme"), nil},
		{"bounded reservation", "permit(principal in Group::\"acme/gpu-users\", action == " + create + ", resource)\n  when { context.gpus <= 8 && resource.offeredTo.contains(principal.tenant) };", nil},

		// Parse errors, at the token that caused them.
		{"missing comma", "permit(principal, action resource);", []string{`1:26:expected ",", found "resource"`}},
		{"missing semicolon", "permit(principal, action, resource)", []string{`1:36:expected ";", but the document ended`}},
		{"misspelled effect on line 2", "permit(principal, action, resource);\npermet(principal, action, resource);", []string{`2:1:expected permit or forbid, found "permet"`}},
		{"bare word", "permit(principal, action, resource) when { x };", []string{`1:44:expected an expression, found "x"`}},
		{"bad escape", `permit(principal == User::"a\q", action, resource);`, []string{"1:27:invalid escape sequence"}},
		{"unterminated string", "permit(principal, action, resource)\n  when { \"open };", []string{"2:10:string not terminated"}},
		{"integer out of range", "permit(principal, action, resource) when {\n  context.gpus < 99999999999999999999 };", []string{"2:18:integer 99999999999999999999 is out of range"}},
		{"NUL byte", "permit(principal, \x00action, resource);", []string{"1:19:invalid character NUL"}},
		{"unknown function", "permit(principal, action, resource) when { foo(1) };", []string{"1:44:`foo` is not a function"}},
		{"duplicate record key", "permit(principal, action, resource) when { {a: 1, a: 2} == {} };", []string{"1:51:duplicate key: a"}},

		// Schema errors, at the offending text where it can be found.
		{"unknown action", "// reserve\npermit(\n  principal,\n  action == Action::\"compute:reservations:craete\",\n  resource);",
			[]string{`4:13:unknown action "compute:reservations:craete" (did you mean "compute:reservations:create"?)`}},
		{"unknown action in a set", `permit(principal, action in [Action::"compute:users:get", Action::"compute:users:gte"], resource);`,
			[]string{`1:59:unknown action "compute:users:gte" (did you mean "compute:users:get"?)`}},
		{"unknown entity type", "permit(principal is Usr, action, resource);", []string{"1:21:unknown entity type Usr (did you mean User?)"}},
		{"unknown entity type in a condition", "permit(principal, action, resource) when { principal in Team::\"acme/x\" };", []string{"1:57:unknown entity type Team"}},
		{"missing context attribute", "permit(principal, action == " + create + ", resource)\nwhen { context.gpuz <= 8 };",
			[]string{`2:16:the context of action "compute:reservations:create" has no attribute "gpuz"`}},
		{"context attribute of another action", "permit(principal, action, resource) when { context.gpus > 3 };",
			[]string{`1:52:has no attribute "gpus"`, `only "compute:reservations:create" and "compute:reservations:extend" have it`}},
		{"missing entity attribute", "permit(principal, action == " + create + ", resource) when { resource.size > 1 };",
			[]string{`1:94:entity type Pool has no attribute "size"`}},
		{"attribute on several types", "permit(principal, action, resource) when { resource.tenant == principal.tenant };",
			[]string{`1:53:entity types System and Tenant have no attribute "tenant"`}},
		{"type error", "permit(principal, action == " + create + ", resource)\n  when { context.gpus };",
			[]string{"2:3:type error: expected Bool, found Long"}},
		{"incomparable types", "permit(principal, action == " + create + ", resource) when { context.gpus == \"8\" };",
			[]string{"1:78:type error: Long and String cannot be compared or combined"}},
		{"action does not apply to the resource", "permit(principal, action == " + create + ", resource is User);",
			[]string{`1:68:action "compute:reservations:create" does not apply to resources of type User, only to Pool`}},
		{"empty set literal", "permit(principal, action, resource) when { [].contains(principal.tenant) };", []string{"1:44:empty set literal"}},
		{"in needs an entity", "permit(principal, action, resource) when { principal.name in principal.tenant };", []string{"1:37:type error: expected an entity, found String"}},
		{"too big", "//" + strings.Repeat("x", iam.MaxPolicyBytes), []string{"0:0:a policy may have at most 65536"}},
		{"too deep", "permit(principal, action, resource) when {\n" + strings.Repeat("(", 70) + "true" + strings.Repeat(")", 70) + " };", []string{"2:64:nest more than 64 deep"}},
		{"too many negations", "permit(principal, action, resource) when { " + strings.Repeat("!", 70) + "true };", []string{"1:107:nest more than 64 deep"}},
		{"problems in two statements, in order", "permit(principal is Usr, action, resource);\n\nforbid(principal, action == Action::\"compute:nope\", resource);",
			[]string{"1:21:unknown entity type Usr", `3:29:unknown action "compute:nope"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := iam.ValidatePolicy(tt.body)
			if tt.want == nil {
				if got != nil {
					t.Fatalf("ValidatePolicy = %v, want valid", got)
				}
				return
			}
			// Several wants may describe one problem (the last one), to
			// check a long message in parts.
			for i, w := range tt.want {
				line, col, sub := splitWant(t, w)
				p := got[min(i, len(got)-1)]
				if (line != 0 || col != 0 || sub != w) && (p.Line != line || p.Column != col) || !strings.Contains(p.Message, sub) {
					t.Errorf("problem %d = %v, want %s", i, p, w)
				}
			}
			for _, p := range got {
				if strings.ContainsAny(p.Message, "\n\r") || p.Message == "" {
					t.Errorf("message %q must be one non-empty line", p.Message)
				}
			}
		})
	}
}

// splitWant reads "line:column:substring"; a want without a position
// checks only the message.
func splitWant(t *testing.T, w string) (line, col int, sub string) {
	t.Helper()
	parts := strings.SplitN(w, ":", 3)
	if len(parts) == 3 {
		l, errL := strconv.Atoi(parts[0])
		c, errC := strconv.Atoi(parts[1])
		if errL == nil && errC == nil {
			return l, c, parts[2]
		}
	}
	return 0, 0, w
}

func TestProblemString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    iam.Problem
		want string
	}{
		{iam.Problem{Line: 3, Column: 14, Message: `unknown action "x"`}, `line 3, column 14: unknown action "x"`},
		{iam.Problem{Line: 3, Message: "m"}, "line 3: m"},
		{iam.Problem{Message: "m"}, "m"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func FuzzValidatePolicy(f *testing.F) {
	for _, s := range []string{
		"",
		iam.TenantAdminsPolicy("acme"),
		iam.PlatformAdminsPolicy(),
		"permit(principal, action resource);",
		`permit(principal, action == Action::"compute:reservations:create", resource) when { context.gpus <= 8 };`,
		`forbid(principal is Usr, action in [Action::"x"], resource) unless { resource.offeredTo.contains(principal.tenant) };`,
		"permit(principal, action, resource) when { \"\\u{zz}\" like \"*\" };",
		"@id(\"a\")\npermit(principal, action, resource) when { {a: [1, -2], b: ip(\"10.0.0.1\")} has a };",
		"/* unterminated",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, p := range iam.ValidatePolicy(body) {
			if p.Line < 0 || p.Column < 0 || (p.Line == 0 && p.Column != 0) {
				t.Fatalf("problem %+v has an impossible position", p)
			}
			if p.Message == "" || strings.ContainsAny(p.Message, "\n\r") {
				t.Fatalf("problem %+v: message must be one non-empty line", p)
			}
		}
	})
}
