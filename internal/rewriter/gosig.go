package rewriter

import (
	"encoding/binary"
	"fmt"

	"github.com/kprewrite/kprewrite/elfio"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// A Go program installs its own SIGTRAP handler with raw rt_sigaction system calls
// (no C library function to wrap): the runtime's initsig replaces the handler our
// start-up installed, and the first int3 probe hit then ends in Go's "SIGTRAP: trace
// trap" throw. What initsig does with a signal is in its table, runtime.sigtable
// ([65]sigTabT{flags int32; name string}, 24 bytes an entry): SIGTRAP's flags are
// _SigThrow|_SigUnblock. With _SigSetStack|_SigUnblock instead, initsig leaves the
// installed handler in place (it only makes sure it has SA_ONSTACK, which ours has),
// signal.Notify cannot take it (no _SigNotify), and the runtime still keeps SIGTRAP
// unblocked on every thread (minit). So the rewrite changes those four bytes of a Go
// program that gets int3 probes.
const (
	goSigtabEntry  = 24
	goSIGTRAP      = 5
	goSigThrow     = 1 << 2
	goSigSetStack  = 1 << 6
	goSigUnblock   = 1 << 7
	goSigtrapFlags = goSigThrow | goSigUnblock
	goSigtrapOurs  = goSigSetStack | goSigUnblock
)

// goSigtrapEdit returns the edit of a Go program's SIGTRAP entry in runtime.sigtable
// when some point is an int3 (or may become one: live points); nothing for other
// programs. A Go program without the symbol, or whose entry is not the one expected,
// is an error: its int3 probes would kill it.
func (g *gen) goSigtrapEdit() ([]elfio.Patch, error) {
	if !g.b.IsGo() {
		return nil, nil
	}
	int3 := len(g.tables.Free) > 0 // (an int3 placed live: kprewrite probe)
	for _, pt := range g.tables.Points {
		int3 = int3 || pt.XMode != kprt.XOptimized || pt.DFlags&kprt.DFLive != 0
	}
	if !int3 {
		return nil, nil
	}
	tab, ok := g.f.GoSigtable()
	const fix = "use --optimized-only, which places no int3"
	if !ok {
		return nil, fmt.Errorf("%s: a Go program whose runtime.sigtable is not found (no symbol, and no one table of the runtime's signal names): its runtime would take over SIGTRAP and "+
			"die at the first int3 probe; %s", g.f.Path, fix)
	}
	addr := tab + goSIGTRAP*goSigtabEntry
	b, err := g.f.Bytes(addr, 4)
	if err != nil {
		return nil, fmt.Errorf("%s: runtime.sigtable at %#x: SIGTRAP's entry cannot be read; %s", g.f.Path, tab, fix)
	}
	if v := binary.LittleEndian.Uint32(b); v != goSigtrapFlags {
		return nil, fmt.Errorf("%s: runtime.sigtable at %#x: SIGTRAP's flags are %#x, not the %#x of the Go runtimes known (_SigThrow|_SigUnblock); %s",
			g.f.Path, tab, v, goSigtrapFlags, fix)
	}
	return []elfio.Patch{{Addr: addr, Bytes: binary.LittleEndian.AppendUint32(nil, goSigtrapOurs)}}, nil
}
