#!/usr/bin/env bash
# The hot event's record piece by piece (issue 49): builds kprewrite variants whose
# detour body (runtime/src/optprobe.S, the fast path of an EVENT line: .Lseq, the path
# of a line whose record is its registers in order) returns early after each step, and runs them with the build as it is, taking turns
# (scripts/bench-builds.sh, under `record` or directly, `p:b/w work a=%di b=%si`):
#   L0    in and out: the detour, the body's registers and flags saved and restored;
#   L1    + the line's checks and the TSC's read (RAW_TSC);
#   L2    + the process's state (HOT_OPEN);
#   L3    + the thread's context (TCTX_FIND);
#   L4    + the CPU and the time (CPU_WORD, TCLK_NOW: the thread's copy of the clock);
#   L5    + the record's size and place (the xadd on the thread's block word);
#   full  + the stores, the fetched arguments, the commit and the count.
# Each row's step is its median less the row above's: what that step costs on this
# machine (CPU ns a hit above the unprobed loop; the tsc floor, rdtsc and a 32-byte
# store, is scripts/bench-floor.sh's). The variants write no records (L5 takes places
# and writes nothing): for measuring only. The runtime's sources are taken from this
# checkout, uncommitted changes included.
#
# usage: [MODE=direct] scripts/bench-ladder.sh [ROUNDS [HITS]]   (default 7 rounds of
#        20000000 hits under `record`; MODE=direct: the programs run directly, each its
#        own trace file; needs gcc and go; takes ~20 s a round)
set -euo pipefail
rounds=${1:-7}
hits=${2:-20000000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-ladder.XXXXXX")
trap 'git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add -q --detach "$work/src" HEAD
cp -r "$root/runtime/src/." "$work/src/runtime/src/"
body=$work/src/runtime/src/optprobe.S
cp "$body" "$work/optprobe.S"

# ladder N: a return to .Lfast_done placed after step N of the body's EVENT path (each
# marker is a line of the body, found by its text: a change that moves them fails here)
ladder() {
	awk -v n="$1" '
	function ret() { print "\tjmp .Lfast_done /* bench-ladder */"; done = 1 }
	/^kprewrite_rt_optprobe_body:/ { inbody = 1 }
	/^\t\.macro SEQ_CHECKS/ { inseq = 1 }
	inseq && !done && n == 1 && /^\tHOT_OPEN OF_HOT_OPEN, \.Lslow/ { ret() }
	inseq && !done && n == 2 && /^\tTCTX_FIND \.Lslow/ { ret() }
	inseq && !done && n == 3 && /^\tCPU_WORD \.Lslow/ { ret() }
	{ print }
	inbody && !done && n == 0 && /^\tFAST_SAVE/ { ret() }
	inseq && !done && n == 4 && /^\tTCLK_NOW \.Lslow/ { ret() }
	inseq && !done && n == 5 && /^\tPLACE \.Llost_placed, 0, \\cfg, 0/ { ret() }
	END { if (!done) exit 1 }' "$work/optprobe.S" >"$body" || { echo "bench-ladder: step $1's marker is not in optprobe.S" >&2; exit 1; }
}
builds=()
for n in 0 1 2 3 4 5 full; do
	if [ "$n" = full ]; then cp "$work/optprobe.S" "$body"; else ladder "$n"; fi
	(cd "$work/src" && go generate ./runtime >/dev/null && go build -o "$work/kp-L$n" ./cmd/kprewrite)
	builds+=("$work/kp-L$n")
done
"$root/scripts/bench-builds.sh" "$rounds" "$hits" "${MODE:-record}" "${builds[@]}" | tee "$work/out"
echo
echo "| step | median | the step |"
echo "|---|---|---|"
grep "^$work/kp-L" "$work/out" | sed "s|^$work/kp-L||; s|:||" |
	awk '{printf "| %s | %.2f | %+.2f |\n", ($1 == "full" ? "full" : "L" $1), $2, NR == 1 ? $2 : $2 - prev; prev = $2}'
