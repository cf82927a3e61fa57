#!/usr/bin/env bash
# Installs Caddy (Debian's package caddy), the reverse proxy of
# deploy/Caddyfile that the tests put in front of the server, when it is
# missing, and prints its path. Safe to run again. Needs root or
# password-less sudo to install. The package's own service is left
# stopped and disabled where it is freshly installed: the tests start
# caddy themselves (on a server, enable it: see the README).
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
fresh=""
command -v caddy >/dev/null 2>&1 || fresh=1
bash "$here/install-debian-package.sh" caddy caddy
if [ -n "$fresh" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo -n"
	$sudo systemctl disable --now caddy >/dev/null 2>&1 || true
fi
