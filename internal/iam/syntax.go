package iam

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Cedar's parser words its errors for its own developers ("exact got X
// want Y") and places them one token late. parseProblem rewords them for a
// person and moves them onto the token at fault.

var (
	parsePosRE = regexp.MustCompile(`^(?:parse error at )?<input>:(\d+):(\d+)(?: ("(?:[^"\\]|\\.)*"))?: (.*)$`)
	exactRE    = regexp.MustCompile(`^exact got (.*) want (.*)$`)
	gotWantRE  = regexp.MustCompile(`^got (.*) want (.*)$`)
	intRangeRE = regexp.MustCompile(`^strconv\.ParseInt: parsing "([0-9]+)": value out of range$`)
	backtickRE = regexp.MustCompile("^`([^`]*)`")
	dupRE      = regexp.MustCompile(`^duplicate (?:key|annotation): @?(.*)$`)
)

// parseProblem turns a Cedar parse error into a Problem at the token that
// caused it.
func parseProblem(body string, err error) Problem {
	// Match on the message as the library wrote it (its spacing matters:
	// "exact got  want ;" is the end of the document); only the text shown
	// is folded onto one line.
	msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "parser error: "), "\n", " ")
	toks := lex(body)
	if m := intRangeRE.FindStringSubmatch(msg); m != nil {
		p := Problem{Message: fmt.Sprintf("integer %s is out of range: a Long is a signed 64-bit integer", m[1])}
		if i := slices.IndexFunc(toks, func(t token) bool { return t.text == m[1] }); i >= 0 {
			p.Line, p.Column = toks[i].line, toks[i].col
		}
		return p
	}
	m := parsePosRE.FindStringSubmatch(msg)
	if m == nil {
		return Problem{Message: "syntax error: " + oneLine(msg)}
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	reported, _ := strconv.Unquote(m[3])
	text := m[4]
	if m[3] == "" {
		// The scanner's own errors (a bad escape, an unterminated string)
		// carry the right position, except for NUL, which it misplaces.
		switch text {
		case "invalid character NUL":
			line, col = position(body, strings.IndexByte(body, 0))
		case "invalid UTF-8 encoding":
			line, col = position(body, firstInvalidUTF8(body))
		}
		if line <= 0 {
			line, col = 0, 0
		}
		text = strings.NewReplacer("literal not terminated", "string not terminated", "invalid char escape", "invalid escape sequence").Replace(text)
		return Problem{Line: max(line, 0), Column: max(col, 0), Message: "syntax error: " + oneLine(text)}
	}

	// The parser consumed the offending token before it noticed, so it
	// names the one after; step back to it. At the end of the document
	// there is nothing after, and it names the end itself.
	at := slices.IndexFunc(toks, func(t token) bool { return t.line == line && t.col == col })
	if at < 0 && reported == "" {
		at = len(toks) // the end of the document
	}
	culprit, culpritAt := "", -1
	if at > 0 && reported != "" {
		culpritAt = at - 1
	} else if at == len(toks) && len(toks) > 0 {
		culpritAt = -1 // the end itself is the culprit
	}
	if culpritAt >= 0 {
		culprit = toks[culpritAt].text
	}
	found := func(what string) string {
		if what == "" {
			return "but the document ended"
		}
		return "found " + strconv.Quote(what)
	}
	move := func() {
		if culpritAt >= 0 {
			line, col = toks[culpritAt].line, toks[culpritAt].col
		}
	}
	switch {
	case exactRE.MatchString(text):
		mm := exactRE.FindStringSubmatch(text)
		if mm[1] == culprit {
			move()
		}
		text = fmt.Sprintf("expected %q, %s", mm[2], found(mm[1]))
	case gotWantRE.MatchString(text):
		// Raised before consuming: the reported token is the culprit.
		mm := gotWantRE.FindStringSubmatch(text)
		text = fmt.Sprintf("expected %q or the end of the list, %s", mm[2], found(mm[1]))
	case strings.HasPrefix(text, "unexpected effect: "):
		move()
		text = fmt.Sprintf("expected permit or forbid, %s", found(strings.TrimPrefix(text, "unexpected effect: ")))
	case text == "invalid primary":
		move()
		text = "expected an expression, " + found(culprit)
	case text == "unexpected token":
		move()
		text = "unexpected " + strings.TrimPrefix(found(culprit), "found ")
	case strings.HasPrefix(text, "expected ident"), strings.HasPrefix(text, "expected string"):
		move()
		want := strings.NewReplacer("ident or reserved keyword", "a name", "ident after dot", "an attribute name after the dot",
			"ident or string", "a name or a string", "ident", "a name", "string literal", "a string", "string", "a string").Replace(strings.TrimPrefix(text, "expected "))
		text = fmt.Sprintf("expected %s, %s", want, found(culprit))
	case backtickRE.MatchString(text), dupRE.MatchString(text):
		// "`foo` is not a function", "duplicate key: a": point at the
		// name, a few tokens back.
		var name string
		if mm := backtickRE.FindStringSubmatch(text); mm != nil {
			name = mm[1]
		} else {
			name = dupRE.FindStringSubmatch(text)[1]
		}
		for i := min(at, len(toks)) - 1; i >= 0 && i >= at-4; i-- {
			if toks[i].text == name || strings.HasSuffix(name, "::"+toks[i].text) {
				line, col = toks[i].line, toks[i].col
				break
			}
		}
	default:
		move()
	}
	return Problem{Line: max(line, 0), Column: max(col, 0), Message: "syntax error: " + oneLine(text)}
}

// firstInvalidUTF8 returns the offset of the first byte of s that is not
// valid UTF-8, or len(s).
func firstInvalidUTF8(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, w := utf8.DecodeRuneInString(s[i:]); w == 1 {
				return i
			}
		}
	}
	return len(s)
}
