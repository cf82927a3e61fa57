#!/usr/bin/env bash
# Installs the pinned Claude Code CLI into .tools/claude (git-ignored) and
# prints the path of the binary. Safe to run again: it does nothing when the
# pinned version is already there.
set -euo pipefail

version="${CLAUDE_CODE_VERSION:-2.1.332}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.tools/claude"
bin="$prefix/node_modules/.bin/claude"

installed() {
	[ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null | awk '{print $1}')" = "$version" ]
}

if ! installed; then
	echo "installing @anthropic-ai/claude-code@$version into $prefix" >&2
	mkdir -p "$prefix"
	npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
		"@anthropic-ai/claude-code@$version" >&2
	if ! installed; then
		echo "install-claude: $bin does not report version $version" >&2
		exit 1
	fi
fi
echo "$bin"
