#!/usr/bin/env bash
# Share of function entries that `kprewrite check` says can be jump-optimized, and the
# top reasons for the rest. Prints a Markdown table for docs/benchmarks.md.
#
#   scripts/coverage.sh [BINARY...]   (default: python3.11, git, node, libc.so.6)
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(/usr/bin/python3.11 /usr/bin/git /usr/bin/node /lib/x86_64-linux-gnu/libc.so.6)
go build -o /tmp/kprewrite.cov ./cmd/kprewrite
echo "| binary | function entries | optimize | boost | single-step | refuse | top reasons for the rest |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for b in "${bins[@]}"; do
	/tmp/kprewrite.cov check --summary "$b" | awk -v name="$(basename "$b")" '
		/probe sites$/ { sites = $(NF-2) }
		/^verdicts:/ { sec = "v"; next }
		/^reasons/ { sec = "r"; next }
		sec == "v" && NF == 3 { v[$1] = $2; p[$1] = $3 }
		sec == "r" && NF == 2 && nr < 4 { r = r (nr ? ", " : "") $1 " " $2; nr++ }
		END { printf "| %s | %d | %s (%s) | %d | %d | %d | %s |\n", name, sites, v["optimize"], p["optimize"], v["boost"], v["single-step"], v["refuse"], r }'
done
