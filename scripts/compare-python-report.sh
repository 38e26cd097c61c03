#!/usr/bin/env bash
# compare-python-report.sh BASE_KPREWRITE - issue 49's "exports of the python trace
# unchanged in content": python3.11 rewritten with `--calls '*'` by BASE and by the
# working tree's kprewrite, each run under its own `record` on bench-python-floor.sh's
# JSON workload, and `kprewrite report` of each trace compared with its times blanked
# (and its lines, ordered by time, sorted): the functions and their call counts must be
# the same. The runs are made repeatable as far as python allows: no ASLR (setarch -R),
# PYTHONHASHSEED=0, the same directory, argv, trace path and length of kprewrite's own
# path for both (python's import system lists the script's directory, and the size of
# the environment `record` passes moves the stack: a change of either changes the calls
# python makes, by a few in 5.9 million). Each build runs twice, taking turns,
# so that a difference between two runs of one build shows as such.
#
# usage: scripts/compare-python-report.sh BASE_KPREWRITE
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BASE_KPREWRITE" >&2; exit 2; }
base=$1
py=/usr/bin/python3.11
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/cmp-pyrep.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/k.new" ./cmd/kprewrite)
cp "$base" "$work/k.base" # (paths of one length: the recorder's environment is the same size)
mkdir "$work/run" "$work/out"
sed -n "/^cat >work.py <<'EOF'/,/^EOF/p" "$root/scripts/bench-python-floor.sh" | sed '1d;$d' >"$work/run/work.py"
for v in base new; do
	"$work/k.$v" rewrite --calls '*' --trace none -o "$work/py.$v" "$py" >/dev/null 2>&1
done
cd "$work/run"
for round in 1 2; do
	for v in base new; do
		k=$work/k.$v
		cp "$work/py.$v" ./python
		PYTHONHASHSEED=0 "$k" record -q -o "$work/out/r.trace" -- setarch -R ./python work.py >/dev/null
		"$k" report -b ./python "$work/out/r.trace" | sed -E 's/[0-9.]+ (ns|us|ms|s)\b/T/g' | tr -s ' ' |
			sort >"$work/out/$v.$round"
		rm -f "$work/out/r.trace" ./python
		echo "$v, run $round: $(grep -c . "$work/out/$v.$round") report lines, $(md5sum <"$work/out/$v.$round" | cut -c1-16)"
	done
done
same=1
for f in base.2 new.1 new.2; do
	if ! cmp -s "$work/out/base.1" "$work/out/$f"; then
		same=0
		echo "report of $f differs from base.1's:"
		diff "$work/out/base.1" "$work/out/$f" | head -20
	fi
done
[ "$same" = 1 ] && echo "identical up to times: every function's call count the same in all four runs"
[ "$same" = 1 ]
