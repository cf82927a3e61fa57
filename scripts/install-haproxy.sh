#!/usr/bin/env bash
# Installs HAProxy (Debian's package haproxy), the proxy of
# deploy/haproxy.cfg that the cluster test puts in front of two servers,
# when it is missing, and prints its path. Safe to run again. Needs root
# or password-less sudo to install. The package's own service is left
# stopped and disabled where it is freshly installed: the tests start
# haproxy themselves (on a proxy machine, enable it: see the README).
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
fresh=""
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || fresh=1
bash "$here/install-debian-package.sh" haproxy haproxy
if [ -n "$fresh" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo -n"
	$sudo systemctl disable --now haproxy >/dev/null 2>&1 || true
fi
