package pki

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// A pin whose base64url form has '_' and '-' in it, so that splitting on
// '_' is tested.
const trickyPin = "sha256:ab_cd-ef_gh-ij_kl-mn_op-qr_st-uv_wx-yzAB_CE"

func TestJoinTokenRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAuthority(t, "bc-test")
	for _, pin := range []string{a.ServingPin(), strings.TrimPrefix(a.ServingPin(), "sha256:"), trickyPin} {
		id, token, hash := NewJoinToken(pin)
		if !regexp.MustCompile(`^bcj_[a-z2-7]{16}_[a-z2-7]{32}_[A-Za-z0-9_-]{43}$`).MatchString(token) {
			t.Fatalf("token %q is not shaped bcj_<id>_<secret>_<pin>", token)
		}
		gotID, gotHash, gotPin, err := ParseJoinToken(token)
		if err != nil {
			t.Fatalf("ParseJoinToken(%q): %v", token, err)
		}
		wantPin := "sha256:" + strings.TrimPrefix(pin, "sha256:")
		if gotID != id || !bytes.Equal(gotHash, hash) || gotPin != wantPin {
			t.Fatalf("ParseJoinToken = %q, %x, %q; want %q, %x, %q", gotID, gotHash, gotPin, id, hash, wantPin)
		}
		secret := strings.Split(token, "_")[2]
		if sum := sha256.Sum256([]byte(secret)); !bytes.Equal(sum[:], hash) {
			t.Fatal("hash is not SHA-256 of the secret")
		}
	}
}

func TestJoinTokensDiffer(t *testing.T) {
	t.Parallel()
	id1, tok1, _ := NewJoinToken(trickyPin)
	id2, tok2, _ := NewJoinToken(trickyPin)
	if id1 == id2 || tok1 == tok2 {
		t.Fatal("two join tokens are equal")
	}
}

func TestParseJoinTokenRefusesMalformed(t *testing.T) {
	t.Parallel()
	_, good, _ := NewJoinToken(trickyPin)
	pin := strings.TrimPrefix(trickyPin, "sha256:")
	for _, tc := range []struct{ name, token string }{
		{"empty", ""},
		{"api token", "bc_abcdefghijklmnop_abcdefghijklmnopqrstuvwxyz234567"},
		{"no pin", good[:len(good)-44]},
		{"short pin", good[:len(good)-1]},
		{"long pin", good + "A"},
		{"pin with padding", good[:len(good)-1] + "="},
		{"pin not canonical", "bcj_abcdefghijklmnop_abcdefghijklmnopqrstuvwxyz234567_" + pin[:42] + "F"},
		{"short id", "bcj_abcdefghijklmno_abcdefghijklmnopqrstuvwxyz234567_" + pin},
		{"upper case id", "bcj_ABCDEFGHIJKLMNOP_abcdefghijklmnopqrstuvwxyz234567_" + pin},
		{"bad secret chars", "bcj_abcdefghijklmnop_abcdefghijklmnopqrstuvwxyz234561_" + pin},
		{"short secret", "bcj_abcdefghijklmnop_abcdefghijklmnopqrstuvwxyz23456_" + pin},
		{"wrong prefix", "bck_abcdefghijklmnop_abcdefghijklmnopqrstuvwxyz234567_" + pin},
		{"spaces", " " + good},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, _, _, err := ParseJoinToken(tc.token); !errors.Is(err, ErrMalformedJoinToken) {
				t.Fatalf("ParseJoinToken(%q) = %v, want ErrMalformedJoinToken", tc.token, err)
			}
		})
	}
}

func TestNewNodeID(t *testing.T) {
	t.Parallel()
	id := NewNodeID()
	if !regexp.MustCompile(`^n-[a-z2-7]{16}$`).MatchString(id) || !validNodeID(id) {
		t.Fatalf("NewNodeID() = %q, want n- and 16 base32 characters", id)
	}
	if NewNodeID() == id {
		t.Fatal("two node ids are equal")
	}
}

// FuzzParseJoinToken checks that ParseJoinToken never panics, and that
// whatever it accepts is canonical: it re-assembles to the same string.
func FuzzParseJoinToken(f *testing.F) {
	_, tok, _ := NewJoinToken(trickyPin)
	f.Add(tok)
	f.Add("bcj_")
	f.Add("bcj____")
	f.Add("bc_abcdefghijklmnop_abcdefghijklmnopqrstuvwxyz234567")
	f.Fuzz(func(t *testing.T, s string) {
		id, hash, pin, err := ParseJoinToken(s)
		if err != nil {
			if !errors.Is(err, ErrMalformedJoinToken) {
				t.Fatalf("ParseJoinToken(%q) = %v, want ErrMalformedJoinToken", s, err)
			}
			return
		}
		secret := strings.SplitN(strings.TrimPrefix(s, "bcj_"), "_", 3)[1]
		if got := "bcj_" + id + "_" + secret + "_" + strings.TrimPrefix(pin, "sha256:"); got != s {
			t.Fatalf("ParseJoinToken(%q) accepted a non-canonical token: re-assembled %q", s, got)
		}
		if sum := sha256.Sum256([]byte(secret)); !bytes.Equal(sum[:], hash) {
			t.Fatalf("ParseJoinToken(%q): hash is not SHA-256 of the secret", s)
		}
	})
}
