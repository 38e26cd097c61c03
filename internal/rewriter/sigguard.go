package rewriter

import (
	"fmt"
	"slices"

	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// addSigGuard gives the runtime the GOT words to wrap: the signal functions when some
// probe is an int3 or some fetch reads memory. A dynamic program whose fetches read
// memory gets kprt.HFFastRead: the runtime checks at start-up that it could wrap every
// word (a program without any is covered: it can change its signal dispositions only by
// raw system calls or through shared libraries, the guard's known limits), but for a
// Go program whose runtime's raw calls planStaticSigGuard could not redirect (slowGo).
// A static program's flag comes from planStaticSigGuard.
func (g *gen) addSigGuard() error {
	if g.fastRead && !patch.IsStatic(g.f) && !g.slowGo {
		g.tables.Flags |= kprt.HFFastRead
	}
	int3, live := len(g.tables.Free) > 0, false // (free live points: an int3 placed live)
	for _, pt := range g.tables.Points {
		int3 = int3 || pt.XMode != kprt.XOptimized || pt.DFlags&kprt.DFLive != 0
		live = live || pt.DFlags&kprt.DFLive != 0
	}
	if !int3 && !g.fastRead {
		return nil
	}
	sg, err := patch.SigGuardSlots(g.f)
	if err != nil {
		return fmt.Errorf("signal guard: %w", err)
	}
	if !live && sg != nil { // fork's word is wrapped for live probes only (a child starts its live-probe thread)
		sg.Slots = slices.DeleteFunc(sg.Slots, func(s kprt.GotSlot) bool { return s.Func == kprt.SGFork })
	}
	g.tables.SigGuard = sg
	return nil
}
