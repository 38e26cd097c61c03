#!/usr/bin/env bash
# Per-hit cost of each probe kind (k, b, o, r, rb, ro), beside the kernel's uprobe and
# uretprobe on the same binary, in one run. Prints a Markdown table for
# docs/benchmarks.md.
#
#   scripts/bench-probes.sh            (root and tracefs at /sys/kernel/tracing for the
#                                       kernel's rows; they say n/a otherwise)
#
# scripts/bench/hit.c calls target() and an unprobed twin N times each and prints the
# difference per call: the cost of a hit. Each kind is a rewrite of hit with one event
# on target ("p:kpwbench/K target" or "r:..."), run with no trace file ("counting":
# the runtime counts hits and nmissed in memory) and with one ("traced": a record per
# hit; KPREWRITE_TRACE_PREFAULT=1 populates the file first, so page allocation is not
# counted). The kernel's rows are the same definitions as uprobe events, enabled in a
# tracing instance (a record per hit). Best of RUNS runs (default 3) of 3 rounds each.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
KP=/tmp/kprewrite.bench
go build -o "$KP" ./cmd/kprewrite
tmp=$(mktemp -d)
tracefs=/sys/kernel/tracing
inst=$tracefs/instances/kpwbench
cleanup() {
	if [ -d "$inst" ]; then
		echo 0 >"$inst/events/kpwbench/enable" 2>/dev/null || true
		rmdir "$inst" 2>/dev/null || true
	fi
	if [ -w "$tracefs/uprobe_events" ]; then
		echo "-:kpwbench/u" >>"$tracefs/uprobe_events" 2>/dev/null || true
		echo "-:kpwbench/ur" >>"$tracefs/uprobe_events" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
gcc -O2 -o "$tmp/hit" scripts/bench/hit.c
gcc -O2 -no-pie -o "$tmp/hitnp" scripts/bench/hit.c
gcc -O2 -o "$tmp/int3" scripts/bench/int3.c
gcc -O2 -o "$tmp/lock" scripts/bench/lock.c

# best "hit" figure (ns) of $runs runs of: env ARGS... BIN N
best() {
	local n=$1 bin=$2
	shift 2
	local b=""
	for _ in $(seq "$runs"); do
		rm -f "$tmp/t.trace"
		v=$(env "$@" "$bin" "$n" | awk '{print $6}')
		b=$(awk -v a="$v" -v b="$b" 'BEGIN { if (b == "" || a < b) print a; else print b }')
	done
	echo "$b"
}

bare=$("$tmp/hit" 2000000 | awk '{print $4}')
# the baseline of the int3 kinds: a bare int3 + SIGTRAP round trip, best of $runs
int3=""
for _ in $(seq "$runs"); do
	v=$("$tmp/int3" 100000 | awk '{print $4}')
	int3=$(awk -v a="$v" -v b="$int3" 'BEGIN { if (b == "" || a < b) print a; else print b }')
done
declare -A counting
echo "| kind | probe | rewrite flags | list shows | counting (ns/hit) | traced (ns/hit) |"
echo "| --- | --- | --- | --- | --- | --- |"
while IFS='|' read -r kind def flags n; do
	out="$tmp/hit.$kind"
	# shellcheck disable=SC2086
	"$KP" rewrite -o "$out" --trace none $flags -e "$def" "$tmp/hit" >/dev/null
	shows=$("$KP" list "$out" | awk '{print $2 " " $5}' | head -1)
	c=$(best "$n" "$out" KPREWRITE_TRACE=)
	counting[$kind]=$c
	tn=$((n < 150000 ? n : 150000)) # 3 rounds x 150,000 records fit in the 64 MiB file
	tr=$(best "$tn" "$out" KPREWRITE_TRACE="$tmp/t.trace" KPREWRITE_TRACE_PREFAULT=1)
	printf '| %s | `%s` | %s | %s | %s | %s |\n' "$kind" "$def" "${flags:-(default)}" "$shows" "$c" "$tr"
done <<'KINDS'
k|p:kpwbench/k target|--no-optimize --no-boost|100000
k-int3|p:kpwbench/k target|--no-optimize --no-boost --single-step int3|100000
b|p:kpwbench/b target|--no-optimize|100000
o|p:kpwbench/o target||3000000
r|r:kpwbench/r target|--no-optimize --no-boost|100000
rb|r:kpwbench/rb target|--no-optimize|100000
ro|r:kpwbench/ro target||3000000
ro-exits|r:kpwbench/rx target|--exits|3000000
KINDS

# events whose fetch arguments read memory: the fault-catching copy (the default when the
# signal guard covers SIGSEGV/SIGBUS) against process_vm_readv (KPREWRITE_SAFE_READ=syscall)
declare -A memrow
while IFS='|' read -r kind def n; do
	"$KP" rewrite -o "$tmp/hit.$kind" --trace none -e "$def" "$tmp/hit" >/dev/null
	for read in fast syscall; do
		tr=$(best "$n" "$tmp/hit.$kind" KPREWRITE_TRACE="$tmp/t.trace" KPREWRITE_TRACE_PREFAULT=1 KPREWRITE_SAFE_READ=$read)
		memrow[$kind.$read]=$tr
		printf '| o, reads memory | `%s` | (default) | KPREWRITE_SAFE_READ=%s | | %s |\n' "$def" "$read" "$tr"
	done
done <<'MEM'
oreg|p:kpwbench/oreg target x=%di:s64|150000
omem|p:kpwbench/omem target x=%di:s64 s=+0(%sp):u64|150000
ostr|p:kpwbench/ostr target x=%di:s64 s=+0(%sp):string|150000
MEM

# --count-only: a count-only detour (in a PIE it calls the runtime's restartable
# sequence to count in this CPU's shard of the trace file)
"$KP" rewrite -o "$tmp/hit.oc" --trace none --count-only -e "p:kpwbench/oc target" "$tmp/hit" >/dev/null
oc=$(best 3000000 "$tmp/hit.oc" KPREWRITE_TRACE="$tmp/t.trace")
printf '| o, --count-only | `p:kpwbench/oc target` | --count-only | %s | %s | |\n' "$("$KP" list "$tmp/hit.oc" | awk '{print $2 " " $5}' | head -1)" "$oc"

# the same in a non-PIE program: the detour counts in its own restartable sequence
# (the inline form) instead of calling the runtime's
"$KP" rewrite -o "$tmp/hitnp.oc" --trace none --count-only -e "p:kpwbench/oc target" "$tmp/hitnp" >/dev/null
ocnp=$(best 3000000 "$tmp/hitnp.oc" KPREWRITE_TRACE="$tmp/t.trace")
printf '| o, --count-only, non-PIE | `p:kpwbench/oc target` | --count-only | %s | %s | |\n' "$("$KP" list "$tmp/hitnp.oc" | awk '{print $2 " " $5}' | head -1)" "$ocnp"

# --count-only return event: counted at target's ret (an [EXIT] count-only detour), no
# return-address hook
"$KP" rewrite -o "$tmp/hit.roc" --trace none --count-only -e "r:kpwbench/roc target" "$tmp/hit" >/dev/null
roc=$(best 3000000 "$tmp/hit.roc" KPREWRITE_TRACE="$tmp/t.trace")
printf '| ro, --count-only | `r:kpwbench/roc target` | --count-only | %s | %s | |\n' "$("$KP" list "$tmp/hit.roc" | awk '{print $2 " " $5}' | head -1)" "$roc"

# a disabled probe (KPREWRITE_DISABLE=all): the detour only tests its gate
d=$(best 3000000 "$tmp/hit.o" KPREWRITE_TRACE= KPREWRITE_DISABLE=all)
printf '| o, disabled | `p:kpwbench/o target` | (default) | KPREWRITE_DISABLE=all | %s | |\n' "$d"

# the kernel's uprobe and uretprobe on the original binary
if [ "$(id -u)" = 0 ] && [ -w "$tracefs/uprobe_events" ]; then
	addr=$((16#$(nm "$tmp/hit" | awk '$3 == "target" {print $1}')))
	off=""
	while read -r typ o v _ _ m _; do # LOAD Offset VirtAddr PhysAddr FileSiz MemSiz ...
		if [ "$typ" = LOAD ] && [ "$addr" -ge $((v)) ] && [ "$addr" -lt $((v + m)) ]; then
			off=$(printf '0x%x' $((addr - v + o)))
		fi
	done < <(readelf -lW "$tmp/hit" | grep ' LOAD ')
	echo "p:kpwbench/u $tmp/hit:$off" >>"$tracefs/uprobe_events"
	echo "r:kpwbench/ur $tmp/hit:$off" >>"$tracefs/uprobe_events"
	mkdir -p "$inst"
	for ev in u ur; do
		echo 0 >"$inst/events/kpwbench/enable"
		echo 1 >"$inst/events/kpwbench/$ev/enable"
		k=$(best 100000 "$tmp/hit")
		name=uprobe
		[ $ev = ur ] && name=uretprobe
		printf '| kernel %s | `%s` | (original binary) | | | %s |\n' "$name" "$(grep "kpwbench/$ev " "$tracefs/uprobe_events" | sed "s|$tmp/||")" "$k"
	done
	echo 0 >"$inst/events/kpwbench/enable"
else
	echo "| kernel uprobe | | | | | n/a (needs root and $tracefs) |"
	echo "| kernel uretprobe | | | | | n/a (needs root and $tracefs) |"
fi
# the baseline of counting: one exact shared counter increment (lock incq) on this CPU
lock=$("$tmp/lock" | awk '{print $3}')
echo
echo "Bare call of the unprobed twin: $bare ns. Bare int3 + SIGTRAP round trip: $int3 ns. Bare lock incq (scripts/bench/lock.c): $lock ns."
awk -v rf="${memrow[oreg.fast]}" -v mf="${memrow[omem.fast]}" -v ms="${memrow[omem.syscall]}" -v sf="${memrow[ostr.fast]}" -v ss="${memrow[ostr.syscall]}" 'BEGIN {
	printf "memory fetch, syscall / fast: +0(%%sp):u64 %.1f, +0(%%sp):string %.1f; the read in the fast hit: %.1f ns\n", ms / mf, ss / sf, mf - rf }'
awk -v b="${counting[b]}" -v k="${counting[k]}" -v ki="${counting[k-int3]}" -v t="$int3" 'BEGIN {
	printf "b / bare int3 round trip = %.2f (goal <= 1.2); b / k = %.2f (goal <= 0.4); b / k-int3 (--single-step int3) = %.2f\n", b / t, b / k, b / ki }'
