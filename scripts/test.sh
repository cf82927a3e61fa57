#!/usr/bin/env bash
# Runs every test (`make test`): the Go tests (the real-CLI ones included)
# with the race detector and, beside them, the web client in headless
# Chromium against the server, lint (vet and staticcheck), the
# benchmarks that need no CLI once in their short form (so none rots)
# and the container image's test (which says IMAGE TEST NOT RUN where
# Podman cannot run a container).
# Needs no input; exits non-zero if any part fails.
#
# All five start at once. The Go tests keep both cores busy, two packages
# at a time; the browser test mostly waits (for the page, the CLI, the
# model), so the others fit around it. The benchmarks are a run of their
# own because `go test -bench` runs packages one after the other. The
# Go tests' output streams; the others' is printed when all have ended.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO="${GO:-go}"
# Every build here (tests, the browser test's server, lint, benchmarks)
# leaves the checkout's path out of what it compiles, so a fresh clone
# finds the packages a clone elsewhere compiled in the build cache
# instead of compiling all of them again.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM
start=$(date +%s)
failed=()

# The CLI is installed (or checked) once, before anything that runs it,
# and every part runs that one.
MAJOR_CLAUDE="$(bash scripts/install-claude.sh)" || exit 1
export MAJOR_CLAUDE

phase() { # name command...: in the background, its output to a log
	local name=$1
	shift
	("$@" </dev/null >"$logs/$name" 2>&1; echo $? >"$logs/$name.rc"; echo "$(($(date +%s) - start))" >"$logs/$name.took") &
}
phase e2e bash web/e2e/run.sh
phase lint make --no-print-directory lint
phase image bash scripts/image-test.sh
# The benchmarks that start no CLI, once each, without the race detector
# (the tests run the same code under it) and built as the browser test
# builds the server, so the two share packages. The whole-server ones
# (cmd/major: real CLIs, a server each) run in `make bench` only; vet
# compiles them here.
phase bench env CGO_ENABLED=0 "$GO" test -count=1 -timeout 20m -short -run '^$' -bench . -benchtime 1x ./relay ./supervisor

# The packages whose tests take longest go first, so the short ones fill
# the gaps at the end instead of one long package running alone there
# (go test starts packages in the order given, two at a time).
long="./cmd/major ./relay ./cluster ./hooks ./supervisor ./vault ./mcpserver ./scriptedmodel"
mod=$("$GO" list -m)
# shellcheck disable=SC2046,SC2086 # one argument per package
pkgs="$long $("$GO" list ./... | sed "s|^$mod|.|" | grep -vxF $(printf -- '-e %s ' $long))"
echo "=== go tests"
# shellcheck disable=SC2086 # one argument per package
"$GO" test -race -count=1 -timeout 20m -short $pkgs </dev/null || failed+=(tests)
echo "=== go tests took $(($(date +%s) - start))s"

wait
for name in lint bench image e2e; do
	rc=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
	echo "=== $name (exit $rc, ended at $(cat "$logs/$name.took" 2>/dev/null || echo ?)s)"
	cat "$logs/$name"
	[ "$rc" = 0 ] || failed+=("$name")
done

echo "=== all took $(($(date +%s) - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "all passed"
