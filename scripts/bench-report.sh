#!/usr/bin/env bash
# Runs the benchmarks and prints each one's ratio to the baseline it runs
# beside (x-baseline: 1.0 is as fast as the baseline, 2.0 twice as slow).
# Absolute times depend on the machine; the ratios are what to compare.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
COUNT=${COUNT:-1}
out=$("$GO" test -run '^$' -bench . -benchmem -count "$COUNT" ./supervisor/ ./relay/ ./internal/...)
printf '%s\n' "$out" | awk '
	/^Benchmark/ {
		for (i = 2; i <= NF; i++) if ($i == "x-baseline") { printf "%-36s %8s x-baseline\n", $1, $(i-1); found++ }
	}
	/^(FAIL|panic)/ { print; bad = 1 }
	END { if (!found || bad) exit 1 }'
