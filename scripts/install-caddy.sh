#!/usr/bin/env bash
# Installs Caddy (Debian's package caddy), the reverse proxy of
# deploy/Caddyfile that the tests put in front of the server, when it is
# missing, and prints its path. Safe to run again. Needs root or
# password-less sudo to install. The package's own service is left
# stopped and disabled: the tests start caddy themselves.
set -euo pipefail

if ! command -v caddy >/dev/null 2>&1; then
	echo "installing caddy (Debian package caddy)" >&2
	sudo=""
	if [ "$(id -u)" != 0 ]; then
		if sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		else
			echo "install-caddy: caddy is missing and this user cannot install packages: run 'apt-get install caddy' as root" >&2
			exit 1
		fi
	fi
	export DEBIAN_FRONTEND=noninteractive
	# No service start from the package's scripts here.
	policy="$(mktemp)"
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	have_policy=""
	[ -e /usr/sbin/policy-rc.d ] && have_policy=1
	[ -n "$have_policy" ] || $sudo cp "$policy" /usr/sbin/policy-rc.d
	rm -f "$policy"
	$sudo apt-get install -y -q caddy >&2 || { $sudo apt-get update -q >&2 && $sudo apt-get install -y -q caddy >&2; }
	[ -n "$have_policy" ] || $sudo rm -f /usr/sbin/policy-rc.d
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		$sudo systemctl disable --now caddy >/dev/null 2>&1 || true
	fi
fi
command -v caddy
