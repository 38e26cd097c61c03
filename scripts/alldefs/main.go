// Command alldefs prints a kprobe-event definition for every function entry of an
// ELF executable ("p:GROUP/fN 0xADDR"), for benchmarks and coverage runs that put a
// probe on every function:
//
//	go run ./scripts/alldefs [-g GROUP] [-r] BINARY > defs.txt
//	kprewrite rewrite --skip-refused -f defs.txt -o OUT BINARY
//
// -r makes return probes ("r:") instead.
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
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: alldefs [-g GROUP] [-r] BINARY")
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
		fmt.Fprintf(w, "%s:%s/f%d %#x\n", kind, *group, i, fn.Addr)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "alldefs:", err)
		os.Exit(1)
	}
}
