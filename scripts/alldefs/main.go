// Command alldefs prints a kprobe-event definition for every function entry of an
// ELF executable ("p:GROUP/fN 0xADDR"), for benchmarks and coverage runs that put a
// probe on every function:
//
//	go run ./scripts/alldefs [-g GROUP] [-r] BINARY > defs.txt
//	kprewrite rewrite --skip-refused -f defs.txt -o OUT BINARY
//
// -r makes return probes ("r:") instead; -calls both, an entry and a return event per
// function ("p:GROUP/fN", "r:GROUP/fN_ret"), which `kprewrite report`, `flamegraph` and
// `trace --format chrome` show as calls.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"github.com/kprewrite/kprewrite/elfio"
)

func main() {
	group := flag.String("g", "kpwall", "event group")
	ret := flag.Bool("r", false, "return probes")
	both := flag.Bool("calls", false, "an entry and a return probe per function")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: alldefs [-g GROUP] [-r | -calls] BINARY")
		os.Exit(2)
	}
	f, err := elfio.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "alldefs:", err)
		os.Exit(1)
	}
	kind := "p"
	if *ret {
		kind = "r"
	}
	w := bufio.NewWriter(os.Stdout)
	for i, fn := range f.Functions().List {
		if *both {
			fmt.Fprintf(w, "p:%s/f%d %#x\nr:%s/f%d_ret %#x\n", *group, i, fn.Addr, *group, i, fn.Addr)
			continue
		}
		fmt.Fprintf(w, "%s:%s/f%d %#x\n", kind, *group, i, fn.Addr)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "alldefs:", err)
		os.Exit(1)
	}
}
