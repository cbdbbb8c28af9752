package api

import (
	"strings"
	"text/template"
)

// installTemplate is the script `nodes install-script` prints: POSIX sh, so
// it runs on any Linux server. It downloads bcd from this server, checks
// the SHA-256 it was given over the authenticated API (so a tampered
// download is refused), installs a systemd unit, joins, and starts bcd.
// --root DIR installs under DIR (for tests and image builds); --no-start
// skips systemd.
var installTemplate = template.Must(template.New("install").Parse(`#!/bin/sh
# Installs bcd, the Better Compute node daemon, joins this host to the
# control plane at {{.Gateway}} and starts it under systemd.
# Options: --root DIR (install under DIR), --no-start (do not touch systemd).
set -eu

ROOT=""
START=1
while [ $# -gt 0 ]; do
	case "$1" in
	--root) ROOT="$2"; shift 2 ;;
	--no-start) START=0; shift ;;
	*) echo "install-bcd: unknown option $1 (use --root DIR, --no-start)" >&2; exit 2 ;;
	esac
done

URL='{{.URL}}'
SHA256='{{.SHA256}}'
GATEWAY='{{.Gateway}}'
TOKEN='{{.Token}}'

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
if command -v curl >/dev/null 2>&1; then
	curl -fsSL "$URL" -o "$tmp"
elif command -v wget >/dev/null 2>&1; then
	wget -q -O "$tmp" "$URL"
else
	echo "install-bcd: need curl or wget to download $URL" >&2
	exit 1
fi
got="$(sha256sum "$tmp" | cut -d ' ' -f 1)"
if [ "$got" != "$SHA256" ]; then
	echo "install-bcd: the download's SHA-256 is $got, expected $SHA256: refusing to install it" >&2
	exit 1
fi

mkdir -p "$ROOT/usr/local/bin" "$ROOT/etc/systemd/system" "$ROOT/var/lib/bcd"
chmod 0700 "$ROOT/var/lib/bcd"
cp "$tmp" "$ROOT/usr/local/bin/bcd"
chmod 0755 "$ROOT/usr/local/bin/bcd"
cat > "$ROOT/etc/systemd/system/bcd.service" <<'UNIT'
[Unit]
Description=Better Compute node daemon
Documentation=https://github.com/better-compute/better-compute
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=/usr/local/bin/bcd node --data-dir /var/lib/bcd
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
UNIT

# The token goes in the environment, which only root can read, not on the
# command line, which every user of the host can.
BCD_JOIN_TOKEN="$TOKEN" "$ROOT/usr/local/bin/bcd" join --server "$GATEWAY" --data-dir "$ROOT/var/lib/bcd"

if [ "$START" = 1 ]; then
	systemctl daemon-reload
	systemctl enable --now bcd.service
fi
echo "install-bcd: bcd is installed and joined"
`))

// installScript fills the template. The values are URLs and tokens of
// known alphabets, so single quotes cannot occur; they are stripped anyway.
func installScript(url, sha256, gateway, token string) string {
	clean := func(s string) string { return strings.ReplaceAll(s, "'", "") }
	var b strings.Builder
	_ = installTemplate.Execute(&b, map[string]string{
		"URL": clean(url), "SHA256": clean(sha256), "Gateway": clean(gateway), "Token": clean(token),
	})
	return b.String()
}
