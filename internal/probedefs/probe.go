package probedefs

import (
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/handlers"
)

// Probe is one event definition resolved to an address of the input binary.
type Probe struct {
	Origin string          // where the definition came from, for messages
	Def    *eventdef.Probe // the parsed definition
	Addr   uint64          // the probed address (the function entry for return probes), set by Resolve
	Func   *elfio.Func     // the function holding Addr, when known (Resolve)
	// Handler is set for a probe a C handler file declares (HandlerDefs); Def is
	// then its "p:handlers/NAME SITE" definition.
	Handler *handlers.Probe
	// Filter is the event's filter expression (kernel grammar, internal/evfilter), ""
	// for none; FilterOrigin says where it was given.
	Filter, FilterOrigin string
	// Triggers are the event's triggers in the kernel's list order (the newest
	// first, the order they run), each with where it was given.
	Triggers []TriggerDef
	// Optional: a refused probe is left out (the rewrite's refusals) without failing
	// the rewrite, with or without SkipRefused (the probes --calls makes, CallProbes).
	Optional bool
	// Spare: a prepared site's placeholder (PrepareProbes): it records nothing; events
	// added at run time ride its probe (kprewrite probe).
	Spare bool
}

// NoExit says why return probe p must hook the return address even with --exits ("":
// it may record at its function's rets): a C handler's kretprobe runs handlers with an
// instance, and a fetch at the entry ($argN in a return event) keeps its value in one.
// (A maxactive bounds the instances of a hooked return address; at the rets there are
// none to run out of.)
func NoExit(p Probe) string {
	switch {
	case !p.Def.Return:
		return ""
	case p.Handler != nil:
		return "a C handler's kretprobe keeps its instance"
	case p.Spare:
		return "a prepared function's return events are added at run time, on the return address"
	}
	prog, err := eventdef.Compile(p.Def, func(string) (uint64, bool) { return 0, true })
	if err != nil || len(prog) < 3 || prog[2]&eventdef.FlagEntryData != 0 {
		return "it fetches at the function's entry ($argN): an instance keeps the values"
	}
	return ""
}
