package rewriter

import (
	"github.com/kprewrite/kprewrite/internal/probedefs"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// wordShape is the word body (kprt.SymWordBody) a detour's stub calls instead of the
// shared body: none, or the record of an entry's stack pointer or of a ret's return
// address, with the flags saved or not.
type wordShape struct {
	exit, entry bool // which record; neither: the shared body
	flagsDead   bool // an entry's: the analysis proved the arithmetic flags dead at the site
}

// wordShapeOf is the word body of plan point i (its table entry rp): a jump-optimized
// point of one traced kprobe event without arguments, filter, trigger or C handler, in
// an image without C handlers, the TSC clock not ruled out by --clock, that is the
// entry of a function whose return events record at its rets (kprt.DFSpEntry) or one
// of those rets (kprt.DFExit, not a tail call's jmp): the records of --calls, the lines
// the runtime gives optprobe.S's .Lword. The runtime checks the line's shape at each
// hit, so a guess that a live change or the runtime's own choice makes wrong costs a
// compare, never a wrong record.
func (g *gen) wordShapeOf(i int, rp *kprt.Point) wordShape {
	pt := &g.plan.Points[i]
	d, ok := g.plainTSCRecord(i)
	if !ok || len(rp.Probes) != 1 || rp.Probes[0].Type != kprt.TKprobe || rp.Probes[0].Flags != kprt.FTrace ||
		len(d.Def.Args) > 0 {
		return wordShape{}
	}
	switch {
	case rp.DFlags&kprt.DFExit != 0 && !pt.ExitTail:
		return wordShape{exit: true}
	case rp.DFlags&kprt.DFSpEntry != 0 && !d.Def.Return:
		return wordShape{entry: true, flagsDead: g.flagsDead(pt.Site)}
	}
	return wordShape{}
}

// plainTSCRecord is the definition of plan point i when the point's record may be
// written by assembly fixed at rewrite time (an inline record, a word body): a
// jump-optimized point, not withheld for live probes, of one traced event without a C
// handler, filter or trigger, not a prepared site's spare, in an image without C
// handlers or --count-only, the TSC clock not ruled out by --clock (the code reads it;
// another clock chosen at run time makes it decline).
func (g *gen) plainTSCRecord(i int) (*probedefs.Probe, bool) {
	pt := &g.plan.Points[i]
	if !pt.Optimized() || pt.Withheld || g.opt.CountOnly || g.opt.Handlers != nil || len(pt.Requests) != 1 ||
		(g.opt.Clock != "" && g.opt.Clock != "tsc") {
		return nil, false
	}
	d := &g.probes[pt.Requests[0]]
	if d.Handler != nil || d.Spare || d.Filter != "" || len(d.Triggers) > 0 {
		return nil, false
	}
	return d, true
}

// body is the address the stub of detour entry e calls: its word body, or the shared
// body.
func (e *dcrEntry) body(rt runtimeSymbols) uint64 {
	flags := 1
	if e.word.flagsDead {
		flags = 0
	}
	switch {
	case e.word.exit:
		return rt.wordBody[1][flags]
	case e.word.entry:
		return rt.wordBody[0][flags]
	}
	return rt.optBody
}
