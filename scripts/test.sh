#!/usr/bin/env bash
# Runs every test (`make test`): the Go tests (the real-CLI ones included)
# with the race detector, then side by side the web client in headless
# Chromium against the server, lint (vet and staticcheck) and every
# benchmark once in its short form (so none rots). Needs no input; exits
# non-zero if any part fails.
#
# The Go tests run alone: they keep both cores busy, two packages at a
# time. The benchmarks are a run of their own because `go test -bench`
# runs packages one after the other. The browser test mostly waits (for
# the page, the CLI, the model), so lint and the benchmarks fit beside it;
# their output is printed when each ends.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO="${GO:-go}"

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM
start=$(date +%s)
failed=()

echo "=== go tests"
"$GO" test -race -count=1 -timeout 20m -short ./... </dev/null || failed+=(tests)
echo "=== go tests took $(($(date +%s) - start))s"

# The packages that have benchmarks.
bench_pkgs=$(grep -rl --include='*_test.go' '^func Benchmark' . | xargs -r -n1 dirname | sort -u)

phase() { # name command...: in the background, its output to a log
	local name=$1
	shift
	("$@" </dev/null >"$logs/$name" 2>&1; echo $? >"$logs/$name.rc") &
}
phase e2e bash web/e2e/run.sh
phase lint make --no-print-directory lint
# Without the race detector (the tests ran the same code under it), and
# built as the browser test builds the server, so the two share packages.
# shellcheck disable=SC2086 # one argument per package
phase bench env CGO_ENABLED=0 "$GO" test -count=1 -timeout 20m -short -run '^$' -bench . -benchtime 1x $bench_pkgs
wait
for name in lint bench e2e; do
	rc=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
	echo "=== $name (exit $rc)"
	cat "$logs/$name"
	[ "$rc" = 0 ] || failed+=("$name")
done

echo "=== all took $(($(date +%s) - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "all passed"
