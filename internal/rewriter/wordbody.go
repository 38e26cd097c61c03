package rewriter

import (
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
	if !pt.Optimized() || pt.Withheld || g.opt.CountOnly || g.opt.Handlers != nil || len(pt.Requests) != 1 ||
		len(rp.Probes) != 1 || (g.opt.Clock != "" && g.opt.Clock != "tsc") {
		return wordShape{}
	}
	q, d := rp.Probes[0], &g.probes[pt.Requests[0]]
	if q.Type != kprt.TKprobe || q.Flags != kprt.FTrace || d.Handler != nil || d.Spare || d.Filter != "" ||
		len(d.Triggers) > 0 || len(d.Def.Args) > 0 {
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
