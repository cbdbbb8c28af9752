package iam

import (
	"errors"
	"strings"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	t.Parallel()
	id, secret, hash := NewToken()
	if !strings.HasPrefix(secret, "bc_"+id+"_") {
		t.Fatalf("secret %q does not carry id %q", secret, id)
	}
	gotID, gotHash, err := ParseToken(secret)
	if err != nil || gotID != id || !TokenHashEqual(gotHash, hash) {
		t.Fatalf("ParseToken(%q) = %q, %x, %v", secret, gotID, gotHash, err)
	}
	id2, _, _ := NewToken()
	if id2 == id {
		t.Error("two tokens share an id")
	}
}

func TestParseTokenRejects(t *testing.T) {
	t.Parallel()
	_, good, _ := NewToken()
	for _, s := range []string{"", "bc_", "token", good[3:], "bc_" + strings.Repeat("a", 16), good + "x", strings.ToUpper(good), strings.Replace(good, "_", "-", 2), good[:len(good)-1] + "1"} {
		if _, _, err := ParseToken(s); !errors.Is(err, ErrMalformedToken) {
			t.Errorf("ParseToken(%q) = %v, want ErrMalformedToken", s, err)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	_, good, _ := NewToken()
	f.Add(good)
	f.Add("bc_x_y")
	f.Fuzz(func(t *testing.T, s string) {
		id, hash, err := ParseToken(s)
		if err != nil {
			return
		}
		if len(hash) != 32 || !strings.HasPrefix(s, TokenPrefix+id+"_") {
			t.Fatalf("accepted %q as id %q", s, id)
		}
	})
}
