package webhooks_test

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/webhooks"
)

// TestSignVector checks Sign against the Standard Webhooks specification's
// published test vector, so that receivers using its libraries verify what
// we send.
func TestSignVector(t *testing.T) {
	t.Parallel()
	const (
		secret = store.WebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts     = 1614265330
		body   = `{"test": 2432232314}`
		want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	got, err := webhooks.Sign(secret, id, ts, []byte(body))
	if err != nil || got != want {
		t.Fatalf("Sign = %q, %v; want %q", got, err, want)
	}
	if !webhooks.Verify(secret, id, ts, []byte(body), "v1,bm90IGl0 "+want) {
		t.Error("Verify refused the vector among several signatures")
	}
	for name, bad := range map[string]func() bool{
		"body":      func() bool { return webhooks.Verify(secret, id, ts, []byte(body+" "), want) },
		"id":        func() bool { return webhooks.Verify(secret, id+"x", ts, []byte(body), want) },
		"timestamp": func() bool { return webhooks.Verify(secret, id, ts+1, []byte(body), want) },
		"secret":    func() bool { return webhooks.Verify(webhooks.NewSecret(), id, ts, []byte(body), want) },
	} {
		if bad() {
			t.Errorf("Verify accepted a changed %s", name)
		}
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	a, b := webhooks.NewSecret(), webhooks.NewSecret()
	if a == b || !strings.HasPrefix(string(a), "whsec_") || len(a) != len("whsec_")+44 {
		t.Errorf("NewSecret = %q, %q; want two different whsec_ and 32 bytes of base64", a, b)
	}
	for _, bad := range []store.WebhookSecret{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not base64!"} {
		_, err := webhooks.Sign(bad, "id", 1, nil)
		if err == nil {
			t.Errorf("Sign with secret %q succeeded", bad)
		} else if len(bad) > len("whsec_") && strings.Contains(err.Error(), string(bad)) {
			t.Errorf("Sign's error %q shows the secret", err)
		}
	}
}
