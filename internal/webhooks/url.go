package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// A webhook makes the control plane send requests to an address a tenant
// chose. Unchecked, that lets a tenant reach what only the control plane
// can: its own loopback services, the cloud's metadata endpoint, the
// private network. So addresses are checked twice: when a webhook is made
// (its host resolved, every address checked) and again on every connection
// (the address actually dialed), since a name can resolve to a public
// address first and a private one later (DNS rebinding).

// maxURLLen bounds a webhook URL.
const maxURLLen = 2048

// lookupTimeout bounds resolving a webhook's host at creation.
const lookupTimeout = 5 * time.Second

// privateHint ends every refusal of a private address.
const privateHint = "use a public endpoint, or start the server with --webhooks-allow-private"

// Non-public ranges that netip has no predicate for.
var (
	thisNetwork  = netip.MustParsePrefix("0.0.0.0/8")      // RFC 791: "this host on this network"
	sharedSpace  = netip.MustParsePrefix("100.64.0.0/10")  // RFC 6598: carrier-grade NAT
	ietfProtocol = netip.MustParsePrefix("192.0.0.0/24")   // RFC 6890: IETF protocol assignments
	benchmarking = netip.MustParsePrefix("198.18.0.0/15")  // RFC 2544
	futureUse    = netip.MustParsePrefix("240.0.0.0/4")    // RFC 1112: reserved, and some networks route it inside
	siteLocal    = netip.MustParsePrefix("fec0::/10")      // RFC 3879: deprecated, still private where it is used
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215: local-use NAT64
)

// embedding is an IPv6 range whose addresses carry an IPv4 address and
// reach it: through a NAT64 gateway, a 6to4 or Teredo relay, or a stack
// that still speaks the deprecated forms. Such an address is as public as
// the IPv4 address it reaches, no more, so that one is checked.
type embedding struct {
	name   string // with its article: "a NAT64"
	prefix netip.Prefix
	v4     func(b [16]byte) [4]byte
}

var embeddings = []embedding{
	// RFC 6052: the well-known prefix is a /96 only.
	{"a NAT64", netip.MustParsePrefix("64:ff9b::/96"), last32},
	// RFC 4291: IPv4-compatible (::/96), deprecated; :: and ::1 are
	// refused before this as unspecified and loopback.
	{"an IPv4-compatible", netip.MustParsePrefix("::/96"), last32},
	// RFC 2765: IPv4-translated, for SIIT.
	{"an IPv4-translated", netip.MustParsePrefix("::ffff:0:0:0/96"), last32},
	// RFC 3056: 6to4 puts the site's IPv4 address in bits 16 to 47.
	{"a 6to4", netip.MustParsePrefix("2002::/16"), func(b [16]byte) [4]byte { return [4]byte{b[2], b[3], b[4], b[5]} }},
	// RFC 4380: Teredo keeps the client's IPv4 address in the last 32
	// bits, every bit inverted.
	{"a Teredo", netip.MustParsePrefix("2001::/32"), func(b [16]byte) [4]byte { return [4]byte{^b[12], ^b[13], ^b[14], ^b[15]} }},
}

// last32 reads the IPv4 address from the last 32 bits, as the /96 forms keep it.
func last32(b [16]byte) [4]byte { return [4]byte{b[12], b[13], b[14], b[15]} }

// URLChecker checks webhook URLs and the addresses they connect to.
type URLChecker struct {
	// AllowPrivate permits loopback, private, link-local and other
	// non-public addresses: for dev, tests and deployments whose receivers
	// are on the private network.
	AllowPrivate bool
	// Lookup resolves a host name; nil uses net.DefaultResolver.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// CheckURL parses raw and refuses it, in one line that says what is wrong
// and what to do, unless it is an absolute http or https URL whose host
// resolves only to addresses the checker allows. It returns the URL
// normalized.
func (c URLChecker) CheckURL(ctx context.Context, raw string) (string, error) {
	u, err := parseURL(raw)
	if err != nil {
		return "", err
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := c.CheckAddr(ip); err != nil {
			return "", fmt.Errorf("webhook URL host %s: %w", host, err)
		}
		return u.String(), nil
	}
	lookup := c.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := lookup(ctx, host)
	if err != nil || len(addrs) == 0 {
		return "", fmt.Errorf("webhook URL host %q does not resolve; check the name, or use an IP address", host)
	}
	for _, a := range addrs {
		if err := c.CheckAddr(a); err != nil {
			return "", fmt.Errorf("webhook URL host %q resolves to %s: %w", host, a.Unmap(), err)
		}
	}
	return u.String(), nil
}

// parseURL checks what a URL says on its own, before any name is resolved.
func parseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("a webhook needs a URL: pass --url https://HOST/PATH")
	}
	if len(raw) > maxURLLen {
		return nil, fmt.Errorf("webhook URL is %d bytes long: at most %d", len(raw), maxURLLen)
	}
	if strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, errors.New("webhook URL holds spaces or control characters; percent-encode them")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("webhook URL does not parse; give it as https://HOST/PATH")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("webhook URL scheme %q is not http or https; give it as https://HOST/PATH", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("webhook URL has no host; give it as https://HOST/PATH")
	}
	if u.User != nil {
		// The URL is shown to whoever may read the webhook and sent in
		// every test payload: no place for a password. Not echoed here
		// either, for the same reason.
		return nil, errors.New("webhook URL carries a user name or password; drop it, and let the receiver check the webhook-signature header, or put a token in the URL's path or query")
	}
	if p := u.Port(); p != "" {
		if n, err := netip.ParseAddrPort("0.0.0.0:" + p); err != nil || n.Port() == 0 {
			return nil, fmt.Errorf("webhook URL port %q is not a port number from 1 to 65535", p)
		}
	}
	u.Fragment, u.RawFragment = "", "" // never sent
	return u, nil
}

// CheckAddr refuses an address that is not public (loopback, private,
// link-local, unspecified, multicast and the like, or an IPv6 address that
// reaches one of those) unless AllowPrivate.
func (c URLChecker) CheckAddr(ip netip.Addr) error {
	if c.AllowPrivate {
		return nil
	}
	if what := nonPublic(ip.Unmap()); what != "" {
		return fmt.Errorf("%s is %s, not allowed as a webhook target: %s", ip.Unmap(), what, privateHint)
	}
	return nil
}

// nonPublic says what kind of non-public address ip is ("a loopback
// address"), or "" for a public one.
func nonPublic(ip netip.Addr) string {
	if !ip.IsValid() {
		return "an invalid address"
	}
	// A prefix never contains a zoned address: without the zone, ranges
	// decide, whatever interface the zone names.
	ip = ip.WithZone("")
	if what := rangeOf(ip); what != "" {
		return "a " + what + " address"
	}
	if nat64Local.Contains(ip) {
		// Where the IPv4 address sits depends on the local prefix's
		// length (RFC 6052 allows six), which only that network knows:
		// no one reading of it can be trusted, and local use is private.
		return "a local-use NAT64 address"
	}
	for _, e := range embeddings {
		if !e.prefix.Contains(ip) {
			continue
		}
		v4 := netip.AddrFrom4(e.v4(ip.As16()))
		if what := rangeOf(v4); what != "" {
			return fmt.Sprintf("%s address for %s, a %s address", e.name, v4, what)
		}
	}
	return ""
}

// rangeOf names the non-public range ip is in, or "" when it is in none;
// it does not look into addresses that carry another.
func rangeOf(ip netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case siteLocal.Contains(ip):
		return "site-local"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.Is4() && ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	case thisNetwork.Contains(ip), sharedSpace.Contains(ip), ietfProtocol.Contains(ip), benchmarking.Contains(ip), futureUse.Contains(ip):
		return "reserved"
	}
	return ""
}

// control is a net.Dialer Control function: it checks the address about
// to be dialed, after any name was resolved, so that a name that resolves
// somewhere else since the webhook was made is still refused.
func (c URLChecker) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook dial %s: %w", address, err)
	}
	if err := c.CheckAddr(ap.Addr()); err != nil {
		return fmt.Errorf("refused to connect: %w", err)
	}
	return nil
}

// logURL is raw as a log line or a delivery error may show it: scheme,
// host and path only. The query often holds the receiver's token
// (?token=...), which a log must not spread.
func logURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a webhook URL that does not parse)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}

// redactError is err's text with the URL the HTTP client put in it cut
// to logURL's form.
func redactError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = logURL(ue.URL)
	}
	return err.Error()
}
