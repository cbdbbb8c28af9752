package webhooks_test

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/webhooks"
)

// lookup resolves from a table, without DNS.
func lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	table := map[string][]string{
		"hooks.example.com": {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"localhost":         {"127.0.0.1", "::1"},
		"mixed.example.com": {"93.184.215.14", "10.1.2.3"},
		"meta.example.com":  {"169.254.169.254"},
	}
	var out []netip.Addr
	for _, a := range table[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if out == nil {
		return nil, errors.New("no such host")
	}
	return out, nil
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	strict := webhooks.URLChecker{Lookup: lookup}
	open := webhooks.URLChecker{Lookup: lookup, AllowPrivate: true}
	tests := []struct {
		url       string
		wantErr   string // "" when strict accepts it
		openToo   bool   // AllowPrivate accepts it
		normalize string
	}{
		{url: "https://hooks.example.com/in?x=1", openToo: true},
		{url: "http://hooks.example.com:8080/in", openToo: true},
		{url: "https://93.184.215.14/in", openToo: true},
		{url: "https://hooks.example.com/in#frag", openToo: true, normalize: "https://hooks.example.com/in"},
		{url: "", wantErr: "needs a URL"},
		{url: "ftp://hooks.example.com/", wantErr: `scheme "ftp"`},
		{url: "file:///etc/passwd", wantErr: `scheme "file"`},
		{url: "hooks.example.com/in", wantErr: `scheme ""`},
		{url: "https:///in", wantErr: "no host"},
		{url: "https://hooks.example.com:0/", wantErr: "port"},
		{url: "https://hooks.example.com:99999/", wantErr: "port"},
		{url: "https://hooks.example.com/a b", wantErr: "spaces"},
		{url: "https://nowhere.example.com/", wantErr: "does not resolve"},
		{url: "https://user:pw@hooks.example.com/in", wantErr: "user name or password"},
		{url: "https://user@hooks.example.com/in", wantErr: "user name or password"},
		{url: "https://@hooks.example.com/in", wantErr: "user name or password"},
		{url: "https://hooks.example.com/in?token=abc&x=%2F", openToo: true},
		{url: "http://localhost:8080/", wantErr: "loopback", openToo: true},
		{url: "http://127.0.0.1/", wantErr: "loopback", openToo: true},
		{url: "http://[::1]/", wantErr: "loopback", openToo: true},
		{url: "http://[::ffff:127.0.0.1]/", wantErr: "loopback", openToo: true},
		{url: "http://10.0.0.1/", wantErr: "private", openToo: true},
		{url: "http://192.168.1.1/", wantErr: "private", openToo: true},
		{url: "http://[fd00::1]/", wantErr: "private", openToo: true},
		{url: "http://169.254.169.254/latest/meta-data", wantErr: "link-local", openToo: true},
		{url: "http://meta.example.com/", wantErr: "link-local", openToo: true},
		{url: "http://0.0.0.0/", wantErr: "unspecified", openToo: true},
		{url: "http://[::]/", wantErr: "unspecified", openToo: true},
		{url: "http://239.1.1.1/", wantErr: "multicast", openToo: true},
		{url: "http://[ff02::1]/", wantErr: "link-local", openToo: true},
		{url: "http://100.64.0.1/", wantErr: "reserved", openToo: true},
		{url: "http://100.127.255.254/", wantErr: "reserved", openToo: true},
		{url: "http://198.18.0.1/", wantErr: "reserved", openToo: true},
		{url: "http://198.19.255.254/", wantErr: "reserved", openToo: true},
		{url: "http://192.0.0.8/", wantErr: "reserved", openToo: true},
		{url: "http://240.0.0.1/", wantErr: "reserved", openToo: true},
		{url: "http://255.255.255.254/", wantErr: "reserved", openToo: true},
		{url: "http://255.255.255.255/", wantErr: "broadcast", openToo: true},
		{url: "http://[fec0::1]/", wantErr: "site-local", openToo: true},
		{url: "http://[::ffff:169.254.169.254]/", wantErr: "169.254.169.254 is a link-local", openToo: true},
		// IPv6 addresses that carry an IPv4 one and reach it: the IPv4
		// address decides.
		{url: "http://[64:ff9b::a9fe:a9fe]/", wantErr: "NAT64 address for 169.254.169.254, a link-local", openToo: true},
		{url: "http://[64:ff9b::127.0.0.1]/", wantErr: "NAT64 address for 127.0.0.1, a loopback", openToo: true},
		{url: "http://[64:ff9b::93.184.215.14]/", openToo: true},
		// Where a local-use NAT64 prefix puts the IPv4 address depends on
		// a prefix length only the local network knows: all refused.
		{url: "http://[64:ff9b:1::a9fe:a9fe]/", wantErr: "local-use NAT64", openToo: true},
		{url: "http://[64:ff9b:1:a9fe:a9:fe00::]/", wantErr: "local-use NAT64", openToo: true}, // 169.254.169.254 under a /48 prefix
		{url: "http://[64:ff9b:1::5db8:d70e]/", wantErr: "local-use NAT64", openToo: true},
		{url: "http://[64:ff9b::a9fe:a9fe%25eth0]/", wantErr: "169.254.169.254, a link-local", openToo: true},
		{url: "http://[fec0::1%25eth0]/", wantErr: "site-local", openToo: true},
		{url: "http://[::a9fe:a9fe]/", wantErr: "IPv4-compatible address for 169.254.169.254, a link-local", openToo: true},
		{url: "http://[::10.0.0.1]/", wantErr: "10.0.0.1, a private", openToo: true},
		{url: "http://[::ffff:0:a9fe:a9fe]/", wantErr: "169.254.169.254, a link-local", openToo: true},
		{url: "http://[2002:a9fe:a9fe::1]/", wantErr: "6to4 address for 169.254.169.254, a link-local", openToo: true},
		{url: "http://[2002:c0a8:101::1]/", wantErr: "192.168.1.1, a private", openToo: true},
		{url: "http://[2002:5db8:d70e::1]/", openToo: true},
		// Teredo keeps the client's address inverted in the last 32 bits.
		{url: "http://[2001:0:4136:e378:8000:63bf:5601:5601]/", wantErr: "Teredo address for 169.254.169.254, a link-local", openToo: true},
		{url: "http://[2001:0:4136:e378:8000:63bf:80ff:fefe]/", wantErr: "127.0.1.1, a loopback", openToo: true},
		{url: "http://[2001:0:4136:e378:8000:63bf:a247:28f1]/", openToo: true}, // client 93.184.215.14
		{url: "http://mixed.example.com/", wantErr: "10.1.2.3", openToo: true},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			t.Parallel()
			got, err := strict.CheckURL(t.Context(), tt.url)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckURL = %v, want accepted", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CheckURL = %q, %v; want an error about %q", got, err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Errorf("CheckURL's error is more than one line: %q", err)
			case tt.wantErr == "" && got != cmpOr(tt.normalize, tt.url):
				t.Errorf("CheckURL = %q, want %q", got, cmpOr(tt.normalize, tt.url))
			}
			if _, err := open.CheckURL(t.Context(), tt.url); (err == nil) != (tt.wantErr == "" || tt.openToo) {
				t.Errorf("with private targets allowed CheckURL = %v", err)
			}
			if err != nil && tt.openToo && !strings.Contains(err.Error(), "--webhooks-allow-private") {
				t.Errorf("refusal %q does not say how to allow private targets", err)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// FuzzCheckURL: whatever it is given, CheckURL never panics, answers in
// one line, and accepts only http(s) URLs with a host whose literal
// address, if any, is public.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://hooks.example.com/in", "http://127.0.0.1:1/", "http://[::ffff:10.0.0.1]/", "https://user:pw@hooks.example.com/",
		"http://0x7f.1/", "http://2130706433/", "http://[fe80::1%25eth0]/", "//hooks.example.com", "https://hooks.example.com:65535",
		"HTTPS://HOOKS.EXAMPLE.COM/", "http://localhost./", "javascript:alert(1)", "https://%68ooks.example.com/",
		"http://[64:ff9b::a9fe:a9fe]/", "http://[2002:a9fe:a9fe::1]/", "http://[2001:0:4136:e378:8000:63bf:5601:5601]/", "http://[::a9fe:a9fe%25x]/",
	} {
		f.Add(s)
	}
	strict := webhooks.URLChecker{Lookup: lookup}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := strict.CheckURL(context.Background(), raw)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("CheckURL(%q) error spans lines: %q", raw, err)
			}
			return
		}
		u, perr := url.Parse(got)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			t.Fatalf("CheckURL(%q) accepted %q, which is not an http(s) URL with a host", raw, got)
		}
		if u.User != nil {
			t.Fatalf("CheckURL(%q) accepted %q, which carries a user name or password", raw, got)
		}
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
			if strict.CheckAddr(ip) != nil {
				t.Fatalf("CheckURL(%q) accepted the non-public address %s", raw, ip)
			}
		} else if _, err := lookup(context.Background(), u.Hostname()); err != nil {
			t.Fatalf("CheckURL(%q) accepted the host %q, which does not resolve", raw, u.Hostname())
		}
	})
}
