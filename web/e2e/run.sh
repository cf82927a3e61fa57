#!/usr/bin/env bash
# Runs the web client's tests: the unit tests, then the browser test that
# drives Chromium against the real server, the pinned Claude Code CLI and
# the offline scripted model. Installs what is missing first (npm packages,
# Chromium from apt, the CLI). Needs no input; exits non-zero on failure.
# Screenshots land in web/e2e/screenshots/.
set -euo pipefail
web="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$web/.." && pwd)"
cd "$web"

for tool in node npm go git; do
	command -v "$tool" >/dev/null || { echo "e2e: $tool is required" >&2; exit 1; }
done

# npm packages, exactly as locked.
if [ ! -f node_modules/playwright-core/package.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error
fi

# A Chromium: $CHROMIUM, one already installed, or Debian's from apt.
find_chromium() {
	for c in "${CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser /usr/bin/google-chrome; do
		if [ -n "$c" ] && [ -x "$c" ]; then echo "$c"; return 0; fi
	done
	return 1
}
if ! chromium="$(find_chromium)"; then
	if command -v apt-get >/dev/null; then
		sudo=""
		[ "$(id -u)" = 0 ] || sudo="sudo -n"
		echo "e2e: installing chromium with apt-get" >&2
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium </dev/null >/dev/null
	fi
	chromium="$(find_chromium)" || { echo "e2e: no Chromium found; install chromium or set CHROMIUM" >&2; exit 1; }
fi
export CHROMIUM="$chromium"

# The pinned Claude Code CLI (the script is idempotent and prints its path).
# make test installs it once for all its parts and passes it on.
if [ -z "${MAJOR_CLAUDE:-}" ]; then
	MAJOR_CLAUDE="$(bash "$root/scripts/install-claude.sh")"
fi
export MAJOR_CLAUDE

node --test test/markdown.test.js test/stream.test.js

# The test kills what it starts; it also lists the process groups here so
# they die with this script even if node itself is killed.
# Everything temporary (vault, binaries, browser profile) goes in one
# folder that is removed at the end.
work="$(mktemp -d)"
pids="$work/pids"
: >"$pids"
export MAJOR_E2E_PIDS="$pids"
runner=""
cleanup() {
	if [ -n "$runner" ]; then
		kill -TERM "$runner" 2>/dev/null && sleep 2
		kill -KILL "$runner" 2>/dev/null || true
	fi
	while read -r pid; do
		kill -KILL -- "-$pid" 2>/dev/null || true
	done <"$pids"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p e2e/screenshots
rm -f e2e/screenshots/*.png
start=$(date +%s)
status=0
# In the background, so a signal to this script is handled at once.
TMPDIR="$work" timeout --kill-after=30 1200 node --test e2e/client.test.js </dev/null &
runner=$!
wait "$runner" || status=$?
runner=""
echo "e2e: browser test took $(($(date +%s) - start))s; screenshots in $web/e2e/screenshots" >&2
exit "$status"
