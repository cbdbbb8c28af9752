package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// TestPoliciesValidate checks what an author sees: each problem where their
// editor can jump to it, a one-line failure with the count, and nothing
// stored by a put of a broken document.
func TestPoliciesValidate(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)
	ctx := context.Background()

	// A syntax error on line 2 (a missing comma).
	broken := writeFile(t, "broken.cedar", "// Line 1 is fine.\npermit(principal, action resource);\n")
	out, _, err := admin.run(ctx, "policies", "validate", broken)
	if err == nil || err.Error() != "policy has 1 problem" {
		t.Errorf("validate of a broken policy: err = %v, want %q", err, "policy has 1 problem")
	}
	if ok, _ := regexp.MatchString(`^`+regexp.QuoteMeta(broken)+`:2:\d+: \S.*\n$`, out); !ok {
		t.Errorf("validate printed %q, want one line %s:2:COLUMN: message", out, broken)
	}

	// Statements that parse but do not match the schema: each is reported.
	unknown := writeFile(t, "unknown.cedar", "permit(principal in NoSuchType::\"x\", action, resource);\n"+
		"forbid(principal, action == Action::\"no-such-action\", resource);\n")
	out, _, err = admin.run(ctx, "policies", "validate", unknown)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := fmt.Sprintf("policy has %d problems", len(lines))
	if len(lines) == 1 {
		want = "policy has 1 problem"
	}
	if err == nil || err.Error() != want {
		t.Errorf("validate of a schema mismatch: err = %v, want %q", err, want)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, unknown+":") {
			t.Errorf("problem line %q does not start with %s:", l, unknown)
		}
	}

	// -o json prints the response and still fails.
	out, _, err = admin.run(ctx, "policies", "validate", broken, "-o", "json")
	res := &apiv1.ValidatePolicyResponse{}
	if jerr := protojson.Unmarshal([]byte(out), res); jerr != nil || len(res.GetProblems()) != 1 || res.GetProblems()[0].GetLine() != 2 || err == nil {
		t.Errorf("validate -o json = %q, %v; want the one problem on line 2, and an error", out, err)
	}

	// Standard input, named <stdin>.
	out, err = admin.runIn("permit(principal, action, resource);\n", "policies", "validate", "-")
	if err != nil || out != "<stdin>: valid\n" {
		t.Errorf("validate - = %q, %v; want <stdin>: valid", out, err)
	}
	out, err = admin.runIn("permit(principal, action resource);", "policies", "put", "from-stdin", "-")
	if err == nil {
		t.Errorf("put of a broken document from stdin succeeded: %q", out)
	}
	admin.fails(t, "not found", "policies", "get", "from-stdin")
	body := `permit(principal in Group::"platform/admins", action, resource);`
	if _, err := admin.runIn(body, "policies", "put", "from-stdin", "-"); err != nil {
		t.Errorf("put from stdin: %v", err)
	}
	// A body without a final newline gets one, so the shell prompt stays on its own line.
	if out := admin.table(t, "policies", "get", "from-stdin"); out != body+"\n" {
		t.Errorf("policies get from-stdin = %q, want %q", out, body+"\n")
	}

	// The schema names the entities policies use.
	if out := admin.table(t, "policies", "schema"); !strings.Contains(out, "Tenant") {
		t.Errorf("policies schema does not mention Tenant:\n%s", out)
	}
}
