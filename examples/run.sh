#!/bin/sh
# run.sh NAME - runs one example of C handlers: builds kprewrite (unless $KPREWRITE names
# a binary), compiles examples/NAME/target.c, rewrites it with the example's handler file
# and runs the result. The files go to $OUT (default: a new temporary directory).
set -eu
name=${1:?usage: sh examples/run.sh kprobe|kretprobe|faultinject|faultinject-libc|latency}
here=$(cd "$(dirname "$0")" && pwd)
dir=$here/$name
target=$dir/target.c
case $name in
faultinject-libc) target=$here/faultinject/target.c ;; # the same program, linked dynamically
esac
if [ ! -f "$target" ]; then
	echo "run.sh: no example $name (kprobe, kretprobe, faultinject, faultinject-libc, latency)" >&2
	exit 2
fi
out=${OUT:-$(mktemp -d)}
kp=${KPREWRITE:-}
if [ -z "$kp" ]; then
	(cd "$here/.." && go build -o "$out/kprewrite" ./cmd/kprewrite)
	kp=$out/kprewrite
fi
cflags="-O1"
case $name in
faultinject) cflags="$cflags -static" ;; # malloc must be inside the binary to be probed
latency) cflags="$cflags -pthread" ;;
esac
handler=$(ls "$dir"/*.c | grep -v '/target\.c$')
set -x
gcc $cflags -o "$out/target" "$target"
"$kp" rewrite --handlers "$handler" -o "$out/target.kp" "$out/target"
"$out/target.kp"
