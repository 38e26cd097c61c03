#!/usr/bin/env bash
# Where the detour's and the trampoline's assembly fast paths (runtime/src/optprobe.S)
# decline to C, and how often (issue 49): builds a kprewrite whose optprobe.S counts each
# conditional jump to .Lslow or .Lrslow (a locked add on its own word, then the jump),
# rewrites PROG with OPTIONS, runs it under that build's `record`, and prints each
# counter that moved with the line of optprobe.S it stands for. A decline a program
# takes often is a record that goes the C way (tens of ns more): python3.11 --calls '*'
# sent 550,000 of 5.8 million records there for tail calls from hooked frames until the
# seventeenth session of issue 49.
#
# The counters are read at exit by a preloaded library (the program must exit through
# exit(), and be a non-PIE or keep its runtime at the address nm gives: python3.11 is).
#
# usage: [MODE=direct] scripts/fastpath-declines.sh PROG 'REWRITE OPTIONS' [ARGS...]
#   (MODE=direct: the program run directly, tracing into a file of its own)
#   e.g. scripts/fastpath-declines.sh /usr/bin/python3.11 "--calls '*'" -c 'import json'
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PROG 'REWRITE OPTIONS' [ARGS...]" >&2; exit 2; }
prog=$1 opts=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/declines.XXXXXX")
trap 'rm -rf "$work"' EXIT
git -C "$root" worktree add -q --detach "$work/src" HEAD
trap 'git -C "$root" worktree remove --force "$work/src"; rm -rf "$work"' EXIT
cp -r "$root/runtime/src/." "$work/src/runtime/src/" # (uncommitted changes included)
python3 - "$work/src/runtime/src/optprobe.S" <<'EOF'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r'\tj(n?[a-z]{1,3})\s+(\.Lslow|\.Lrslow|\\fail)\b', lambda m: '\tJF %s, %s' % (m.group(1), m.group(2)), s)
hdr = '''
	.bss
	.globl kprw_dbg
	.hidden kprw_dbg
	.balign 64
kprw_dbg:
	.zero 8*4096
	.text
	.macro JF cc, fail
	.pushsection .text.kdbg,"ax",@progbits
.Ldbg\\@:
	lock incq kprw_dbg+8*\\@(%rip)
	jmp \\fail
	.popsection
	j\\cc .Ldbg\\@
	.endm
'''
s = s.replace('\t.section .note.GNU-stack,"",@progbits\n', '\t.section .note.GNU-stack,"",@progbits\n' + hdr, 1)
open(p, 'w').write(s)
EOF
(cd "$work/src" && go generate ./runtime >/dev/null && go build -o "$work/kp" ./cmd/kprewrite)
# the listing maps each counter (the macro invocation number) to its source line
(cd "$work/src/runtime/src" && gcc -c -I../include -Wa,-alm="$work/lst" -o "$work/o.o" optprobe.S)
cat >"$work/dump.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
__attribute__((destructor)) static void dump(void)
{
	const char *at = getenv("KPRW_DBG_AT");
	if (!at)
		return;
	unsigned long *p = (unsigned long *)strtoul(at, 0, 16);
	for (int i = 0; i < 4096; i++)
		if (p[i])
			fprintf(stderr, "kprw_dbg %d %lu\n", i, p[i]);
}
EOF
gcc -shared -fPIC -O2 -o "$work/dump.so" "$work/dump.c"
eval "\"$work/kp\" rewrite $opts --trace none -o \"$work/prog\" \"$prog\"" >/dev/null
at=$(nm "$work/prog" | awk '$3 == "kprw_dbg" {print $1}')
if [ "${MODE:-record}" = direct ]; then # (run as a user runs it without record: the file not pre-populated)
	KPREWRITE_TRACE="$work/r.trace" KPRW_DBG_AT=$at LD_PRELOAD="$work/dump.so" "$work/prog" "$@" 2>"$work/err" >/dev/null || true
else
	KPRW_DBG_AT=$at LD_PRELOAD="$work/dump.so" "$work/kp" record -o "$work/r.trace" -- "$work/prog" "$@" 2>"$work/err" >/dev/null || true
fi
grep -v '^kprw_dbg' "$work/err" >&2 || true
grep '^kprw_dbg' "$work/err" | sort -k3 -n -r | while read -r _ k n; do
	line=$(grep -m1 -n "kprw_dbg+8\*$k(" "$work/lst" | awk '{print $2}')
	src=$(awk -v l="$line" '$1 == l && $0 !~ /kprw_dbg|pushsection|popsection|Ldbg/ {sub(/^ *[0-9]+ +([0-9a-f]{4} [0-9A-F]+ +)?\t?/, ""); print; exit}' "$work/lst")
	printf '%10d  optprobe.S (preprocessed) line %s: %s\n' "$n" "$line" "$src"
done
