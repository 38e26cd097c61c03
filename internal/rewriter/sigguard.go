package rewriter

import (
	"fmt"

	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// addSigGuard gives the runtime the GOT words to wrap: the signal functions when some
// probe is an int3 or some fetch reads memory. A dynamic program whose fetches read
// memory gets kprt.HFFastRead: the runtime checks at start-up that it could wrap every
// word (a program without any is covered: it can change its signal dispositions only by
// raw system calls or through shared libraries, the guard's known limits). A static
// program's flag comes from planStaticSigGuard.
func (g *gen) addSigGuard() error {
	if g.fastRead && !patch.IsStatic(g.f) {
		g.tables.Flags |= kprt.HFFastRead
	}
	int3 := false
	for _, pt := range g.tables.Points {
		if pt.XMode != kprt.XOptimized || pt.DFlags&kprt.DFLive != 0 {
			int3 = true
			break
		}
	}
	if !int3 && !g.fastRead {
		return nil
	}
	sg, err := patch.SigGuardSlots(g.f)
	if err != nil {
		return fmt.Errorf("signal guard: %w", err)
	}
	g.tables.SigGuard = sg
	return nil
}
