package probedefs

import (
	"fmt"
	"path"
	"strconv"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/internal/eventdef"
)

// CallsGroup is the event group of the probes --calls makes.
const CallsGroup = "calls"

// CallsReturnSuffix ends the name of a --calls return event (perf probe's name for a
// return probe: FUNC__return).
const CallsReturnSuffix = "__return"

// CallsMaxActive is the maxactive of a --calls return event (r64:): the frames of one
// function it follows at once where it hooks the return address. The kernel's default
// (max(10, 2*CPUs)) lost 633 of python3.11's 1,371 _PyEval_EvalFrameDefault returns on
// a JSON workload (a recursion deeper than 10), and each deeper call searched its pool
// for stale instances by system call; 64 is the uprobe tracer's bound on a task's
// hooked returns (MAX_URETPROBE_DEPTH). The instances past the default cost nothing
// until a recursion reaches them (the runtime lays them out after every probe's first
// ones).
const CallsMaxActive = 64

// CallProbes returns an entry event and a return event (p:calls/NAME ADDR and
// r64:calls/NAME__return ADDR), optional probes (refused ones are left out, not an
// error), on every function of b whose name or an alias matches one of globs (path.Match
// patterns: "*" is every function) and that is a function proper: called, its address
// taken or exported (analysis.Binary.Referenced), not the entry point. A start that is
// only jumped to may be a fragment of another function, where a return probe would
// break the program. When the analysis refuses one probe of a pair, the other stays (its
// records are instants, not calls). Event
// names are the symbol with every byte that is not a letter, digit or '_' made '_', cut
// to fit, and made unique against the events of have with _2, _3...
func CallProbes(b *analysis.Binary, globs []string, have []Probe) ([]Probe, error) {
	return functionProbes(b, globs, have, CallsGroup, "--calls")
}

// PrepareGroup is the event group of the placeholders --prepare makes.
const PrepareGroup = "prepared"

// PrepareProbes returns, as CallProbes does, an entry and a return probe on every
// function matching globs, as placeholders (Spare, group PrepareGroup): they record
// nothing; the events `kprewrite probe` adds to the running program ride them.
func PrepareProbes(b *analysis.Binary, globs []string, have []Probe) ([]Probe, error) {
	ps, err := functionProbes(b, globs, have, PrepareGroup, "--prepare")
	for i := range ps {
		ps[i].Spare = true
	}
	return ps, err
}

// functionProbes is CallProbes with the events in group, origin flag.
func functionProbes(b *analysis.Binary, globs []string, have []Probe, group, flag string) ([]Probe, error) {
	for _, g := range globs {
		if _, err := path.Match(g, ""); err != nil {
			return nil, fmt.Errorf("%s %q: %w", flag, g, err)
		}
	}
	taken := map[string]bool{}
	for _, p := range have {
		if p.Def != nil && p.Def.Group == group {
			taken[p.Def.Event] = true
		}
	}
	matches := func(name string) bool {
		for _, g := range globs {
			if ok, _ := path.Match(g, name); ok {
				return true
			}
		}
		return false
	}
	var out []Probe
	for _, fn := range b.Funcs.List {
		hit := matches(fn.Name)
		for _, a := range fn.Aliases {
			hit = hit || matches(a)
		}
		if !hit || !b.Referenced(fn.Addr) || fn.Addr == b.File.Entry {
			continue // (the entry point never returns: a return probe there is refused)
		}
		name := callEventName(fn.Name, taken)
		origin := flag + " " + fn.Name
		ret := "r"
		if group == CallsGroup {
			ret = "r" + strconv.Itoa(CallsMaxActive)
		}
		for _, def := range []string{
			fmt.Sprintf("p:%s/%s %#x", group, name, fn.Addr),
			fmt.Sprintf("%s:%s/%s%s %#x", ret, group, name, CallsReturnSuffix, fn.Addr),
		} {
			d, err := eventdef.Parse(def)
			if err != nil {
				return nil, fmt.Errorf("%s: internal error: %q: %w", origin, def, err)
			}
			out = append(out, Probe{Def: d, Origin: origin, Optional: true})
		}
	}
	return out, nil
}

// callEventName makes a function's name an event name not in taken (and takes it, and
// its return event's name).
func callEventName(fn string, taken map[string]bool) string {
	room := eventdef.MaxEventNameLen - 1 - len(CallsReturnSuffix) - 6 // and _NNNNN
	base := eventdef.SanitizeName(fn)
	if len(base) > room {
		base = base[:room]
	}
	name := base
	for n := 2; taken[name] || taken[name+CallsReturnSuffix]; n++ {
		name = base + "_" + strconv.Itoa(n)
	}
	taken[name], taken[name+CallsReturnSuffix] = true, true
	return name
}
