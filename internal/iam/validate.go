package iam

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

// Problem is one thing wrong with a policy document.
type Problem struct {
	// Line is 1-based; 0 when the problem concerns the whole document.
	Line int
	// Column is 1-based, counted in characters; 0 when unknown.
	Column int
	// Message says what is wrong, on one line, for a person.
	Message string
}

// String formats the problem as "line 3, column 14: message".
func (p Problem) String() string {
	switch {
	case p.Line == 0:
		return p.Message
	case p.Column == 0:
		return fmt.Sprintf("line %d: %s", p.Line, p.Message)
	}
	return fmt.Sprintf("line %d, column %d: %s", p.Line, p.Column, p.Message)
}

// ValidatePolicy checks a policy document: that it parses, and that every
// statement in it is valid against the schema (known entity types and
// actions, existing attributes, well-typed conditions, actions that apply to
// the principal and resource the statement names). It returns nil for a
// valid document, and the problems in document order otherwise.
//
// A parse error stops the check, so at most one is reported. A document with
// no statements (empty, or only comments) is valid: it permits and forbids
// nothing, which is what its author wrote. A document over MaxPolicyBytes,
// or nested deeper than MaxPolicyNesting, is refused before Cedar sees it:
// the parser and the validator recurse, and a server must not let one
// request spend seconds or its stack on them.
func ValidatePolicy(body string) []Problem {
	if len(body) > MaxPolicyBytes {
		return []Problem{{Message: fmt.Sprintf("the document is %d bytes; a policy may have at most %d", len(body), MaxPolicyBytes)}}
	}
	toks := lex(body)
	if p, ok := tooDeep(toks); ok {
		return []Problem{p}
	}
	list, err := cedar.NewPolicyListFromBytes("", []byte(body))
	if err != nil {
		return []Problem{parseProblem(body, err)}
	}
	var probs []Problem
	for i, p := range list {
		end := len(body)
		if i+1 < len(list) {
			end = list[i+1].Position().Offset
		}
		st := stmtSource{body: body, toks: toks, start: p.Position().Offset, end: end, pos: p.Position()}
		probs = append(probs, validateStatement(st, (*xast.Policy)(p.AST()))...)
	}
	slices.SortStableFunc(probs, func(a, b Problem) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	return slices.Compact(probs)
}

// Limits on a policy document. Real policies are a few hundred bytes and
// nest a few levels; these leave ample room while keeping the worst case
// (deeply nested sets) to a fraction of a second.
const (
	// MaxPolicyBytes is the largest policy document accepted.
	MaxPolicyBytes = 64 << 10
	// MaxPolicyNesting is the deepest nesting of brackets and unary
	// operators accepted.
	MaxPolicyNesting = 64
)

// tooDeep reports a problem at the first token nested deeper than
// MaxPolicyNesting: open brackets, plus runs of ! and - (each one more
// level of the parser's recursion).
func tooDeep(toks []token) (Problem, bool) {
	depth, unary := 0, 0
	for _, t := range toks {
		switch t.text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth = max(depth-1, 0)
		}
		if t.text == "!" || t.text == "-" {
			unary++
		} else {
			unary = 0
		}
		if depth+unary > MaxPolicyNesting {
			return Problem{Line: t.line, Column: t.col, Message: fmt.Sprintf("expressions nest more than %d deep", MaxPolicyNesting)}, true
		}
	}
	return Problem{}, false
}

// oneLine keeps a message on one line, whatever the library said.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "invalid policy"
	}
	return s
}

// stmtSource is one statement's place in its document.
type stmtSource struct {
	body       string
	toks       []token
	start, end int // byte offsets
	pos        cedar.Position
}

// tokens returns the statement's tokens, found by binary search: a
// document may hold thousands of statements.
func (s stmtSource) tokens() []token {
	byOff := func(t token, off int) int { return t.off - off }
	lo, _ := slices.BinarySearchFunc(s.toks, s.start, byOff)
	hi, _ := slices.BinarySearchFunc(s.toks, s.end, byOff)
	return s.toks[lo:max(lo, hi)]
}

// at returns a Problem at the first token of the statement for which match
// holds, or at the statement's start.
func (s stmtSource) at(msg string, match func(toks []token, i int) bool) Problem {
	toks := s.tokens()
	for i := range toks {
		if match != nil && match(toks, i) {
			return Problem{Line: toks[i].line, Column: toks[i].col, Message: msg}
		}
	}
	return Problem{Line: s.pos.Line, Column: s.pos.Column, Message: msg}
}

var (
	unknownActionRE = regexp.MustCompile("^unrecognized action `Action::(\"(?:[^\"\\\\]|\\\\.)*\")`$")
	unknownTypeRE   = regexp.MustCompile("^unrecognized entity type `([^`]*)`$")
	contextAttrRE   = regexp.MustCompile("^attribute `([^`]*)` in context for Action::(\"(?:[^\"\\\\]|\\\\.)*\") not found$")
	entityAttrRE    = regexp.MustCompile("^attribute `([^`]*)` on entity types? (.*) not found$")
	expectedTypeRE  = regexp.MustCompile(`^unexpected type: expected (.*) but saw (.*)$`)
	incompatibleRE  = regexp.MustCompile(`^the types (.*) and (.*) are not compatible$`)
)

const noApplicableAction = "unable to find an applicable action given the policy scope constraints"

// validateStatement checks one statement against the schema and words what
// the validator found for a person: one problem per mistake (the validator
// repeats an attribute error for every action the statement covers), at
// the mistake where it can be found in the text.
func validateStatement(st stmtSource, p *xast.Policy) []Problem {
	err := cschema.validator.Policy("", p)
	if err == nil {
		return nil
	}
	var probs []Problem
	scopeBroken := false
	contextMissing := map[string][]string{} // attribute -> actions lacking it
	entityMissing := map[string][]string{}  // attribute -> entity types lacking it
	var order []string                      // first appearance of each attribute problem
	var applicable bool
	for _, e := range flatten(err) {
		msg := oneLine(e.Error())
		switch {
		case unknownActionRE.MatchString(msg):
			scopeBroken = true
			quoted := unknownActionRE.FindStringSubmatch(msg)[1]
			name, _ := strconv.Unquote(quoted)
			text := fmt.Sprintf("unknown action %s", quoted)
			if s := suggest(name, cschema.actionNames); s != "" {
				text += fmt.Sprintf(" (did you mean %q?)", s)
			}
			probs = append(probs, st.at(text, func(t []token, i int) bool {
				return t[i].text == "Action" && i+2 < len(t) && t[i+1].text == "::" && t[i+2].text == quoted
			}))
		case unknownTypeRE.MatchString(msg):
			scopeBroken = true
			name := unknownTypeRE.FindStringSubmatch(msg)[1]
			first, _, _ := strings.Cut(name, "::")
			text := fmt.Sprintf("unknown entity type %s", name)
			if s := suggest(name, cschema.typeNames); s != "" {
				text += fmt.Sprintf(" (did you mean %s?)", s)
			}
			probs = append(probs, st.at(text, func(t []token, i int) bool {
				return t[i].text == first && (i == 0 || t[i-1].text != ".")
			}))
		case contextAttrRE.MatchString(msg):
			m := contextAttrRE.FindStringSubmatch(msg)
			action, _ := strconv.Unquote(m[2])
			k := "context\x00" + m[1]
			if _, seen := contextMissing[k]; !seen {
				order = append(order, k)
			}
			contextMissing[k] = append(contextMissing[k], action)
		case entityAttrRE.MatchString(msg):
			m := entityAttrRE.FindStringSubmatch(msg)
			k := "entity\x00" + m[1]
			if _, seen := entityMissing[k]; !seen {
				order = append(order, k)
			}
			for t := range strings.SplitSeq(m[2], ", ") {
				entityMissing[k] = append(entityMissing[k], strings.Trim(t, "`"))
			}
		case msg == "empty set literals are forbidden in policies":
			probs = append(probs, st.at("empty set literal: [] has no element type, so Cedar cannot check it; test isEmpty() instead", func(t []token, i int) bool {
				return t[i].text == "[" && i+1 < len(t) && t[i+1].text == "]"
			}))
		case msg == noApplicableAction:
			applicable = true
		case expectedTypeRE.MatchString(msg):
			m := expectedTypeRE.FindStringSubmatch(strings.ReplaceAll(msg, "__cedar::internal::AnyEntity", "an entity"))
			probs = append(probs, st.at(fmt.Sprintf("type error: expected %s, found %s", m[1], m[2]), conditionStart))
		case incompatibleRE.MatchString(msg):
			m := incompatibleRE.FindStringSubmatch(msg)
			probs = append(probs, st.at(fmt.Sprintf("type error: %s and %s cannot be compared or combined", m[1], m[2]), conditionStart))
		default:
			probs = append(probs, st.at(msg, nil))
		}
	}
	for _, k := range order {
		kind, attr, _ := strings.Cut(k, "\x00")
		var text string
		if kind == "context" {
			text = contextAttrMessage(attr, contextMissing[k])
		} else {
			ts := slices.Compact(slices.Sorted(slices.Values(entityMissing[k])))
			if len(ts) == 1 {
				text = fmt.Sprintf("entity type %s has no attribute %q", ts[0], attr)
			} else {
				text = fmt.Sprintf("entity types %s have no attribute %q: narrow the scope with `is` or test it with `has`", joinAnd(ts), attr)
			}
		}
		last := attr[strings.LastIndexAny(attr, ".[")+1:]
		last = strings.Trim(last, `"]`)
		probs = append(probs, st.at(text, func(t []token, i int) bool {
			return i > 0 && (t[i].text == last && (t[i-1].text == "." || t[i-1].text == "has") ||
				t[i].text == strconv.Quote(last) && (t[i-1].text == "[" || t[i-1].text == "has"))
		}))
	}
	if applicable && !scopeBroken {
		msg, where := scopeMismatchMessage(p)
		probs = append(probs, st.at(msg, func(t []token, i int) bool {
			return i > 0 && t[i].text == where && (t[i-1].text == "," || t[i-1].text == "(")
		}))
	}
	return probs
}

// conditionStart matches the first when or unless of a statement, where a
// type error lives.
func conditionStart(t []token, i int) bool { return t[i].text == "when" || t[i].text == "unless" }

// contextAttrMessage words a missing context attribute, naming the actions
// that lack it and, when the statement covers several, the ones that have it.
func contextAttrMessage(attr string, lacking []string) string {
	lacking = slices.Compact(slices.Sorted(slices.Values(lacking)))
	if len(lacking) == 1 {
		return fmt.Sprintf("the context of action %q has no attribute %q", lacking[0], attr)
	}
	var having []string
	for uid, ctx := range cschema.contexts {
		if ctx[attr] {
			having = append(having, strconv.Quote(string(uid.ID)))
		}
	}
	slices.Sort(having)
	quoted := make([]string, 0, 3)
	for _, a := range lacking[:min(3, len(lacking))] {
		quoted = append(quoted, strconv.Quote(a))
	}
	text := fmt.Sprintf("the context of %d of the actions this statement covers has no attribute %q (%s", len(lacking), attr, strings.Join(quoted, ", "))
	if len(lacking) > 3 {
		text += ", ..."
	}
	text += ")"
	if len(having) > 0 {
		text += fmt.Sprintf("; only %s %s it: name the action with action == or action in [...]", joinAnd(having), map[bool]string{true: "has", false: "have"}[len(having) == 1])
	}
	return text
}

// scopeMismatchMessage explains a statement whose actions apply to none of
// the principal or resource types it names, precisely when it names one
// action, and says which scope is at fault ("principal", "resource") when
// it can tell.
func scopeMismatchMessage(p *xast.Policy) (msg, where string) {
	const generic = "no action in this statement applies to the principal and resource types it names (see the actions' appliesTo in the schema)"
	eq, ok := p.Action.(xast.ScopeTypeEq)
	if !ok {
		return generic, ""
	}
	at, ok := cschema.actions[eq.Entity]
	if !ok {
		return generic, ""
	}
	if t, ok := scopeType(p.Resource); ok && !at.resources[types.EntityType(t)] {
		_, rs, _ := ActionAppliesTo(string(eq.Entity.ID))
		return fmt.Sprintf("action %q does not apply to resources of type %s, only to %s", eq.Entity.ID, t, joinAnd(rs)), "resource"
	}
	if t, ok := scopeType(p.Principal); ok && !at.principals[types.EntityType(t)] {
		ps, _, _ := ActionAppliesTo(string(eq.Entity.ID))
		return fmt.Sprintf("action %q does not apply to principals of type %s, only to %s", eq.Entity.ID, t, joinAnd(ps)), "principal"
	}
	return generic, ""
}

// scopeType returns the one entity type a principal or resource scope
// requires, when it requires one.
func scopeType(scope any) (entityType string, ok bool) {
	switch sc := scope.(type) {
	case xast.ScopeTypeEq:
		return string(sc.Entity.Type), true
	case xast.ScopeTypeIs:
		return string(sc.Type), true
	case xast.ScopeTypeIsIn:
		return string(sc.Type), true
	}
	return "", false
}

// flatten unwraps joined errors into a list.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// joinAnd lists words as "a, b and c".
func joinAnd(words []string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// suggest returns the candidate closest to s when it is close enough to be
// a likely typo, else "".
func suggest(s string, candidates []string) string {
	best, bestD := "", len(s)/4+2
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
