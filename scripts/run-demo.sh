#!/usr/bin/env bash
# Starts Major on a demo vault (.demo/, git-ignored). Without an Anthropic
# credential in the environment the CLI talks to the offline scripted model.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
demo="$root/.demo"
vault="$demo/vault"
token="${MAJOR_DEMO_TOKEN:-demo-token}"

if [ ! -d "$vault/.git" ]; then
	mkdir -p "$vault/sebastian" "$vault/petra"
	printf '# Welcome\n\nThis is the demo vault of sebastian.\n' > "$vault/sebastian/welcome.md"
	printf '# Welcome\n\nThis is the demo vault of petra.\n' > "$vault/petra/welcome.md"
	git -C "$vault" init -q -b main
	git -C "$vault" -c user.name=major -c user.email=major@localhost add -A
	git -C "$vault" -c user.name=major -c user.email=major@localhost commit -qm "Demo vault"
fi
if [ ! -f "$demo/auth.json" ]; then
	printf '{"tokens": {"%s": ["sebastian", "petra"]}}\n' "$token" > "$demo/auth.json"
fi
mkdir -p "$demo/home"

cleanup() { [ -n "${model_pid:-}" ] && kill "$model_pid" 2>/dev/null || true; }
trap cleanup EXIT

if [ -z "${ANTHROPIC_API_KEY:-}${ANTHROPIC_AUTH_TOKEN:-}${CLAUDE_CODE_OAUTH_TOKEN:-}" ]; then
	log="$demo/scriptedmodel.log"
	"$root/bin/scriptedmodel" --addr 127.0.0.1:0 > "$log" 2>&1 &
	model_pid=$!
	for _ in $(seq 50); do grep -q listening "$log" 2>/dev/null && break; sleep 0.1; done
	url="$(sed -n 's/.*listening on //p' "$log" | head -n1)"
	[ -n "$url" ] || { echo "the scripted model did not start:"; cat "$log"; exit 1; }
	export ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY="offline-demo" CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
	# The demo keeps the CLI's own state out of your real ~/.claude.
	export HOME="$demo/home"
	cat <<MSG
######################################################################
#  NO ANTHROPIC CREDENTIAL SET: running on the OFFLINE SCRIPTED MODEL #
#  at $url. Answers are canned; set ANTHROPIC_API_KEY for a real model.
######################################################################
MSG
fi

addr="${MAJOR_ADDR:-127.0.0.1:8080}"
cat <<MSG
Demo vault: $vault   token: $token   persons: sebastian, petra
Web client: http://$addr/app/
Try: curl -N -H 'Authorization: Bearer $token' -H 'X-Notes-Person: sebastian' \\
       -d message=hello http://$addr/api/claude/chat-stream
MSG
"$root/bin/major" serve --addr "$addr" --vault-root "$vault" --state-dir "$demo/state" \
	--auth-file "$demo/auth.json" "$@"
