#!/usr/bin/env bash
# Runs the benchmarks and prints each one's ratio to the baseline it runs
# beside (x-baseline: 1.0 is as fast as the baseline, 2.0 twice as slow),
# with the other figures it reports (medians in ms, p99 in µs, bytes).
# Absolute times depend on the machine; the ratios are what to compare.
# The whole-server benchmarks on the real CLI run a fixed 7 iterations
# (medians of 7); BENCH_TIME=1x runs every benchmark once.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
COUNT=${COUNT:-1}
BENCH_TIME=${BENCH_TIME:-}
unit=${BENCH_TIME:-1s}
cli=${BENCH_TIME:-7x}
out=$( {
	"$GO" test -run '^$' -bench . -benchmem -count "$COUNT" -benchtime "$unit" ./supervisor/ ./relay/ ./gateway/ ./internal/...
	"$GO" test -run '^$' -bench . -count "$COUNT" -benchtime "$cli" ./cmd/major/
} 2>&1)
printf '%s\n' "$out" | awk '
	/^Benchmark/ {
		line = sprintf("%-40s", $1)
		for (i = 3; i < NF; i++) {
			u = $(i+1)
			if (u == "x-baseline") { line = line sprintf(" %8s x-baseline", $i); found++ }
			else if (u ~ /^x-/) line = line sprintf("  %s %s", $i, u)
			else if (u ~ /-(ms|us)$|B\/session$/) line = line sprintf("  %s %s", $i, u)
		}
		print line
	}
	/^(FAIL|panic|---)/ { print; bad = 1 }
	END { if (!found || bad) exit 1 }'
