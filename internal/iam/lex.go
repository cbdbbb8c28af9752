package iam

import (
	"strings"
	"unicode/utf8"
)

// A light tokenizer for Cedar policy text, used only to point problems at
// the right place: Cedar's parser reports the token after the one it choked
// on, and its validator reports no positions at all. It splits exactly as
// Cedar's scanner does where it matters for locating (comments, strings,
// identifiers, operators) and counts columns the same way, in characters
// from 1.

// token is one token of a policy document.
type token struct {
	text      string // as written; strings keep their quotes
	off       int    // byte offset
	line, col int    // 1-based; col counts characters
}

func isIdentStart(r rune) bool {
	return r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
}

func isIdentPart(r rune) bool { return isIdentStart(r) || ('0' <= r && r <= '9') }

// lex splits src into tokens, never failing: an unterminated string or
// comment runs to the end.
func lex(src string) []token {
	var toks []token
	line, col := 1, 1
	i := 0
	// advance moves i past n bytes, keeping line and col.
	advance := func(n int) {
		for end := i + n; i < end && i < len(src); {
			r, w := utf8.DecodeRuneInString(src[i:])
			i += w
			if r == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
		}
	}
	for i < len(src) {
		r, w := utf8.DecodeRuneInString(src[i:])
		rest := src[i:]
		start := token{off: i, line: line, col: col}
		var n int
		switch {
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			advance(w)
			continue
		case strings.HasPrefix(rest, "//"):
			n = strings.IndexByte(rest, '\n')
			if n < 0 {
				n = len(rest)
			}
			advance(n)
			continue
		case strings.HasPrefix(rest, "/*"):
			n = strings.Index(rest[2:], "*/")
			if n < 0 {
				n = len(rest)
			} else {
				n += 4
			}
			advance(n)
			continue
		case r == '"':
			n = 1
			for n < len(rest) && rest[n] != '"' {
				if rest[n] == '\\' {
					n++
				}
				n++
			}
			n = min(n+1, len(rest))
		case isIdentStart(r):
			n = w
			for n < len(rest) {
				r2, w2 := utf8.DecodeRuneInString(rest[n:])
				if !isIdentPart(r2) {
					break
				}
				n += w2
			}
		case '0' <= r && r <= '9':
			n = 1
			for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
				n++
			}
		default:
			n = w
			for _, op := range []string{"::", "==", "!=", "<=", ">=", "&&", "||"} {
				if strings.HasPrefix(rest, op) {
					n = 2
					break
				}
			}
		}
		start.text = rest[:n]
		toks = append(toks, start)
		advance(n)
	}
	return toks
}

// position returns the 1-based line and column of byte offset off in src.
func position(src string, off int) (line, col int) {
	off = min(max(off, 0), len(src))
	line = 1 + strings.Count(src[:off], "\n")
	lineStart := strings.LastIndexByte(src[:off], '\n') + 1
	return line, 1 + utf8.RuneCountInString(src[lineStart:off])
}
