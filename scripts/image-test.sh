#!/usr/bin/env bash
# The container image's test (`make image-test`; `make test` runs it
# too): builds the image (scripts/build-image.sh), starts it with a vault
# and a state volume against the offline scripted model, runs one chat
# through it, and stops it. Where Podman cannot run a container at all
# it says so, loudly, and exits 0: the rest of `make test` goes on, and
# its output shows that this test did not run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"

not_run() {
	echo "IMAGE TEST NOT RUN: $*" >&2
	echo "image-test: not run"
	exit 0
}
[ "$(id -u)" = 0 ] || not_run "building the image needs root (debootstrap)"
command -v podman >/dev/null || command -v apt-get >/dev/null || not_run "no podman, and no apt-get to install it"

image="$(bash scripts/build-image.sh)"

# How this machine runs a container: as it is, or with runc (crun refuses
# cgroups in hybrid mode) and the resource limits the machine allows.
run_args=()
probe() { podman run --rm --network host "$@" localhost/major-base:bookworm /bin/true >/dev/null 2>"$work/probe.err"; }
work="$(mktemp -d)"
container=""
model=""
cleanup() {
	if [ -n "$container" ]; then
		podman rm -f -t 5 "$container" >/dev/null 2>&1 || true
	fi
	if [ -n "$model" ]; then
		kill "$model" 2>/dev/null || true
		wait "$model" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
# Debian's runc, for machines whose cgroups crun refuses.
bash scripts/install-debian-package.sh runc runc >/dev/null || true
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=$(( $(ulimit -Hu) < 32768 ? $(ulimit -Hu) : 32768 )):$(( $(ulimit -Hu) < 32768 ? $(ulimit -Hu) : 32768 ))")
found=""
for args in "" "--runtime=runc" "LIMITS" "--runtime=runc LIMITS"; do
	candidate=()
	for a in $args; do
		if [ "$a" = LIMITS ]; then candidate+=("${limits[@]}"); else candidate+=("$a"); fi
	done
	if probe "${candidate[@]}"; then
		run_args=("${candidate[@]}")
		found=1
		break
	fi
done
[ -n "$found" ] || not_run "podman cannot run a container on this machine: $(tail -1 "$work/probe.err")"
echo "image-test: podman runs containers here with: ${run_args[*]:-(defaults)}" >&2

# The offline scripted model, on the host's loopback (the container
# shares the host's network).
"$GO" build -o "$work/scriptedmodel" ./cmd/scriptedmodel
"$work/scriptedmodel" --addr 127.0.0.1:0 >"$work/model.log" 2>&1 &
model=$!
for _ in $(seq 100); do
	url="$(grep -o 'listening on http://[^ ]*' "$work/model.log" | head -1 | cut -d' ' -f3 || true)"
	[ -n "$url" ] && break
	sleep 0.1
done
[ -n "$url" ] || { cat "$work/model.log" >&2; echo "image-test: the scripted model did not start" >&2; exit 1; }

mkdir -p "$work/vault/sebastian" "$work/state"
echo "# Notes" >"$work/vault/sebastian/welcome.md"
git -C "$work/vault" init -q -b main
git -C "$work/vault" -c user.name=major -c user.email=major@localhost add -A
git -C "$work/vault" -c user.name=major -c user.email=major@localhost commit -qm "Test vault"
echo '{"tokens": {"image-test-token": ["sebastian"]}}' >"$work/state/tokens.json"

container="major-image-test-$$"
podman run -d --name "$container" --network host --security-opt systempaths=unconfined --security-opt seccomp=unconfined "${run_args[@]}" \
	-v "$work/vault:/srv/major/vault:U" -v "$work/state:/var/lib/major:U" \
	-e ANTHROPIC_BASE_URL="$url" -e ANTHROPIC_API_KEY=image-test -e CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
	-e MAJOR_ADDR=127.0.0.1:0 "$image" >/dev/null
addr=""
for _ in $(seq 300); do
	addr="$(podman logs "$container" 2>&1 | grep '"major is serving"' | grep -o '"addr":"[^"]*"' | cut -d'"' -f4 || true)"
	[ -n "$addr" ] && break
	[ "$(podman inspect --format '{{.State.Running}}' "$container")" = true ] || break
	sleep 0.2
done
if [ -z "$addr" ]; then
	podman logs "$container" >&2 || true
	echo "image-test: the server in the container did not start" >&2
	exit 1
fi
reply="$(curl -sS --max-time 120 -N -H 'Authorization: Bearer image-test-token' -H 'X-Notes-Person: sebastian' \
	-d 'message=[[say Hello from the container]]' "$addr/api/claude/chat-stream")"
if ! grep -q 'Hello from the container' <<<"$reply" || ! grep -q '"type":"done"' <<<"$reply"; then
	echo "$reply" >&2
	podman logs "$container" 2>&1 | tail -40 >&2
	echo "image-test: no answer through the container" >&2
	exit 1
fi
podman stop -t 20 "$container" >/dev/null
if ! podman logs "$container" 2>&1 | grep -q '"major has stopped"'; then
	podman logs "$container" 2>&1 | tail -20 >&2
	echo "image-test: the server did not stop cleanly on SIGTERM" >&2
	exit 1
fi
echo "image-test: passed (one chat through $image, sandbox on, as user $(podman inspect --format '{{.Config.User}}' "$container"))"
