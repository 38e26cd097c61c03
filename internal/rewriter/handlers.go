package rewriter

import (
	"fmt"
	"hash"
	"slices"

	"github.com/kprewrite/kprewrite/internal/objlink"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// C handlers (Options.Handlers, `--handlers FILE.c`): their probes come in the probe list
// with Probe.Handler set, as kprobe-event definitions "p:handlers/NAME SITE" (so sites
// resolve and plan like -e ones, and `list`, `profile` and KPREWRITE_DISABLE name them),
// but with no trace record: the runtime probe is FUser, pointing at the handler file's
// struct kprobe / struct kretprobe, whose handlers the runtime calls. Their objects are
// linked after the runtime's; the program symbols they name with KPREWRITE_PROGRAM_SYMBOL
// resolve in the input.

// handlerRef is a handler probe's place in the tables: Points[point].Probes[slot].
type handlerRef struct{ point, slot, req int }

// handlerObjects parses the handler objects to link after the runtime, after checking
// that the program defines every symbol they name.
func (g *gen) handlerObjects() ([]*objlink.Object, error) {
	hs := g.opt.Handlers
	if hs == nil {
		return nil, nil
	}
	for _, name := range hs.Externs {
		if _, ok := g.symbols[name]; !ok {
			return nil, fmt.Errorf("%s: the C handlers use %s (KPREWRITE_PROGRAM_SYMBOL), which is not found in %s", g.f.Path, name, g.f.Path)
		}
	}
	objs, err := hs.Objects()
	if err != nil {
		return nil, fmt.Errorf("C handlers: %w", err)
	}
	return objs, nil
}

// programSymbol resolves, for the linker, the program symbols the handlers name.
func (g *gen) programSymbol(name string) (uint64, bool) {
	if g.opt.Handlers == nil {
		return 0, false
	}
	for _, e := range g.opt.Handlers.Externs {
		if e == name {
			a, ok := g.symbols[name]
			return a, ok
		}
	}
	return 0, false
}

// handlerProbe makes q, the runtime probe of request ri at Points[point].Probes[slot],
// a C handler probe (its struct's address is set by placeHandlers).
func (g *gen) handlerProbe(q *kprt.Probe, ri, point, slot int) {
	h := g.probes[ri].Handler
	q.Flags = kprt.FUser // no trace record: the handlers are the probe
	q.User = 1           // placeholder until linked
	q.DataSize = uint32(h.DataSize)
	g.hrefs = append(g.hrefs, handlerRef{point: point, slot: slot, req: ri})
}

// libraryExitHook says whether the image is a library whose C handlers have a
// kprewrite_exit(): its DT_FINI becomes the runtime's kprewrite_rt_lib_fini, which runs
// it at exit and then calls the library's own DT_FINI (a program's runs from the
// function its entry hands __libc_start_main to register with atexit).
func (g *gen) libraryExitHook() bool {
	return g.library && g.opt.Handlers != nil && g.opt.Handlers.Exit
}

// placeHandlers sets the linked addresses of the probes' structs and of kprewrite_init
// and kprewrite_exit.
func (g *gen) placeHandlers(out *objlink.Output) error {
	for _, r := range g.hrefs {
		h := g.probes[r.req].Handler
		a, ok := out.Addr(h.Name)
		if !ok {
			return fmt.Errorf("%s: %s is not a global symbol of the linked handlers", h.Origin(), h.Name)
		}
		g.tables.Points[r.point].Probes[r.slot].User = a
	}
	if hs := g.opt.Handlers; hs != nil {
		if hs.Init {
			g.tables.Init, _ = out.Addr(kprt.SymUserInit)
		}
		if hs.Exit {
			g.tables.Exit, _ = out.Addr(kprt.SymUserExit)
		}
		for _, st := range hs.Stack {
			g.tables.HandlerStack = max(g.tables.HandlerStack, uint64(st.Bytes))
		}
	}
	return nil
}

// hashHandlers adds the handler objects to the image id.
func (g *gen) hashHandlers(h hash.Hash) {
	hs := g.opt.Handlers
	if hs == nil {
		return
	}
	h.Write(hs.Support)
	for _, u := range hs.Units {
		fmt.Fprintf(h, "\x00%s\x00", u.File)
		h.Write(u.Object)
	}
}

// reserveAbsSlots sizes the tables' list of absolute words before the layout is known:
// the C handlers' structs hold function pointers, and the runtime could hold some too
// (absolute words the runtime rebases); their number does not depend on where things
// go, so a dry-run link at address 0 counts them, with or without handlers.
func (g *gen) reserveAbsSlots(lk *objlink.Linker) error {
	dry, err := lk.Link(objlink.Bases{}, func(string) (uint64, bool) { return 0, true })
	if err != nil {
		return fmt.Errorf("link the runtime and the C handlers: %w", err)
	}
	g.tables.AbsSlots = make([]uint64, len(dry.AbsSlots))
	return nil
}

// handlersRead reports whether the C handlers read memory through the runtime's
// fault-safe copies (kprewrite_copy_nofault, kprewrite_strncpy_nofault and the
// kernel-named helpers on top of them).
func (g *gen) handlersRead() bool {
	return g.handlersCall("kprewrite_copy_nofault", "kprewrite_strncpy_nofault")
}

// handlersCall says whether a C handler file calls one of the runtime's functions fns
func (g *gen) handlersCall(fns ...string) bool {
	if g.opt.Handlers == nil {
		return false
	}
	for _, u := range g.opt.Handlers.Units {
		for _, n := range u.Undefined {
			if slices.Contains(fns, n) {
				return true
			}
		}
	}
	return false
}
