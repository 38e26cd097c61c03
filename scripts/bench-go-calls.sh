#!/usr/bin/env bash
# The per-call cost of tracing a Go program's calls (issue 48): a Go program calls
# main.work(a, b) CALLS times in a loop and prints its own ns per call (wall time
# of the loop, the Go runtime's monotonic clock). Taking turns in each round:
#   - the original program;
#   - kprewrite rewrite --calls 'main.work' (an entry event after Go's stack check and
#     a return event at the exits, each record carrying its goroutine id), run under
#     `kprewrite record` (a 64 MiB ring) and directly (its own trace file);
#   - the kernel's uprobe tracer on the same entry (tracefs uprobe_events, p:
#     main.work's address, enabled; a uretprobe is not used: it breaks Go's stacks),
#     when /sys/kernel/tracing is writable (root).
# Each cost is the run's ns per call minus the same round's original; the table gives
# medians over the rounds and the records the traces kept (nothing lost).
#
# usage: scripts/bench-go-calls.sh [ROUNDS [CALLS]]   (default 5 rounds of 2000000)
set -euo pipefail
rounds=${1:-5}
calls=${2:-2000000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-go.XXXXXX")
tfs=/sys/kernel/tracing
cleanup() {
	if [ -w "$tfs/uprobe_events" ]; then
		echo 0 > "$tfs/events/gobench/enable" 2>/dev/null || true
		echo '-:gobench/w' >> "$tfs/uprobe_events" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
(cd "$root" && go build -o "$work/kp" ./cmd/kprewrite)
mkdir prog && cd prog
cat > go.mod <<'GOEOF'
module gobench

go 1.22
GOEOF
cat > main.go <<'GOEOF'
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// work has Go's stack check (it may call itself), so its entry event goes after the
// check and its return event at its ret: a call's two records
//
//go:noinline
func work(a, b int) int {
	if a < 0 {
		return work(a+1, b)
	}
	return a + b
}

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	s := 0
	t0 := time.Now()
	for i := 0; i < n; i++ {
		s += work(i, 3)
	}
	d := time.Since(t0)
	fmt.Printf("ns=%.2f sum=%d\n", float64(d.Nanoseconds())/float64(n), s)
}
GOEOF
CGO_ENABLED=0 GOFLAGS= GOTOOLCHAIN=local go build -o "$work/orig" .
cd "$work"
./kp rewrite --calls 'main.work' -o calls.kp orig 2>/dev/null
kernel=0
if [ -w "$tfs/uprobe_events" ]; then
	addr=$(go tool nm orig | awk '$3 == "main.work" {print $1}')
	off=$(printf '0x%x' $((0x$addr - 0x400000)))
	if echo "p:gobench/w $work/orig:$off" >> "$tfs/uprobe_events" 2>/dev/null; then kernel=1; fi
fi

ns() { sed -n 's/^ns=\([0-9.]*\).*/\1/p'; }
declare -A cost
for r in $(seq 1 "$rounds"); do
	base=$(./orig "$calls" | ns)
	rm -f rec.trace direct.trace direct.trace.old
	rec=$(./kp record -q -o rec.trace --buffer-size 64M -- ./calls.kp "$calls" | ns)
	dir=$(KPREWRITE_TRACE=direct.trace KPREWRITE_QUIET=1 KPREWRITE_TRACE_SIZE=1G ./calls.kp "$calls" | ns)
	cost[rec]+="$(echo "$rec - $base" | bc -l) "
	cost[direct]+="$(echo "$dir - $base" | bc -l) "
	cost[orig]+="$base "
	if [ $kernel = 1 ]; then
		echo 1 > "$tfs/events/gobench/w/enable"
		echo > "$tfs/trace"
		k=$(./orig "$calls" | ns)
		echo 0 > "$tfs/events/gobench/w/enable"
		cost[kernel]+="$(echo "$k - $base" | bc -l) "
	fi
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "Go program, main.work called $calls times, $rounds rounds (medians, ns per call):"
printf '  %-44s %8s\n' "original loop" "$(echo "${cost[orig]}" | median)"
printf '  %-44s %8s\n' "--calls main.work under record (above orig)" "$(echo "${cost[rec]}" | median)"
printf '  %-44s %8s\n' "--calls main.work direct (above orig)" "$(echo "${cost[direct]}" | median)"
if [ $kernel = 1 ]; then
	printf '  %-44s %8s\n' "kernel uprobe, entry only (above orig)" "$(echo "${cost[kernel]}" | median)"
fi
echo "records: record $(./kp trace --no-header rec.trace | wc -l), direct $(./kp trace --no-header direct.trace | wc -l) (want $((2 * calls)) each)"
