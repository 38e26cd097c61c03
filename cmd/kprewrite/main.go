package main

import (
	"os"
	"runtime/debug"

	"github.com/kprewrite/kprewrite/internal/cleanup"
	"github.com/kprewrite/kprewrite/internal/cli"
)

func main() {
	// A rewrite of a large program holds a few hundred MB live for a second or two,
	// and with Go's default GOGC=100 the heap grows to twice that between
	// collections: 40% headroom lowers node's peak by a quarter for a few percent
	// more time (docs/benchmarks.md). A GOGC the user sets wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(40)
	}
	// temporary files (the output being written, the C handlers' build) go when
	// interrupted
	cleanup.OnSignal()
	cleanup.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
