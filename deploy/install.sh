#!/usr/bin/env bash
# Installs Major as a systemd service on a Debian server (see the README,
# "A service"): run as root from a checkout whose bin/major is built
# (`make build`, on any machine with Go), naming the persons:
#
#   sudo bash deploy/install.sh sebastian petra
#
# It installs git, bubblewrap and npm from Debian, the pinned Claude Code
# CLI into /opt/major/claude, the binary into /usr/local/bin, the unit
# (deploy/major.service), a user major, the vault /srv/major/vault (a git
# repository with one folder per person), /etc/major/major.env for the
# Anthropic credential, and a first token for the persons, printed once
# on the last line. Then it starts the service. Safe to run again: what
# exists is kept (the vault, the tokens, the environment file).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ "$(id -u)" = 0 ] || { echo "install: run as root" >&2; exit 1; }
[ $# -gt 0 ] || { echo "usage: deploy/install.sh PERSON..." >&2; exit 1; }
[ -x "$root/bin/major" ] || { echo "install: $root/bin/major is missing: make build" >&2; exit 1; }
version="$(sed -n 's/^version="\${CLAUDE_CODE_VERSION:-\(.*\)}"$/\1/p' "$root/scripts/install-claude.sh")"

export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q git bubblewrap npm ca-certificates >&2
id major >/dev/null 2>&1 || useradd --system --user-group --home-dir /var/lib/major --shell /usr/sbin/nologin major
install -d -o major -g major -m 0700 /var/lib/major
install -d -o major -g major -m 0750 /srv/major/vault
install -d -m 0755 /etc/major /etc/major/config /usr/local/share/doc/major

if [ ! -x /opt/major/claude/node_modules/.bin/claude ] || [ "$(/opt/major/claude/node_modules/.bin/claude --version | awk '{print $1}')" != "$version" ]; then
	echo "install: the Claude Code CLI $version into /opt/major/claude" >&2
	npm install --prefix /opt/major/claude --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$version" >&2
fi
install -m 0755 "$root/bin/major" /usr/local/bin/major
install -m 0644 "$root/deploy/major.service" /etc/systemd/system/major.service
install -m 0644 "$root/README.md" /usr/local/share/doc/major/README.md
if [ ! -e /etc/major/major.env ]; then
	install -m 0640 -g major /dev/null /etc/major/major.env
	echo "# ANTHROPIC_API_KEY=sk-ant-... (or CLAUDE_CODE_OAUTH_TOKEN=...)" >/etc/major/major.env
fi

vault() { runuser -u major -- git -C /srv/major/vault -c user.name=major -c user.email=major@localhost "$@"; }
[ -d /srv/major/vault/.git ] || vault init -q -b main
for person in "$@"; do
	if [ ! -d "/srv/major/vault/$person" ]; then
		runuser -u major -- mkdir -p "/srv/major/vault/$person"
		echo "# Notes of $person" | runuser -u major -- tee "/srv/major/vault/$person/README.md" >/dev/null
	fi
done
vault add -A
vault diff --cached --quiet || vault commit -qm "Persons' folders"

systemctl daemon-reload
token=""
if [ ! -s /var/lib/major/tokens.json ]; then
	persons="$(IFS=,; echo "$*")"
	token="$(runuser -u major -- /usr/local/bin/major token add --auth-file /var/lib/major/tokens.json --person "$persons" --name setup | tail -1)"
fi
systemctl enable --now major >&2
echo "install: major runs on 127.0.0.1:8080 (systemctl status major); put your Anthropic key in /etc/major/major.env and systemctl restart major" >&2
if [ -n "$token" ]; then
	echo "install: the first token, for $*; it is shown only now (sign in with it, then pair your devices):" >&2
	echo "$token"
fi
