package probedefs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evfilter/elfsyms"
)

// FilterSpec is one filter assignment: "GROUP/EVENT:EXPR" or "EVENT:EXPR", as
// `rewrite --filter` takes it and a definitions file's "filter GROUP/EVENT:EXPR"
// line. EXPR "0" removes the event's filter, as writing 0 into the kernel's filter
// file does.
type FilterSpec struct {
	Origin string // "--filter #2", "probes.txt:7"
	Text   string
}

// attachFilters gives each event its filter: the specs apply in order, a later one
// replacing an earlier one, as successive writes to the event's filter file do. Each
// expression is parsed against its event's fields, so a bad filter is refused here with
// the kernel's message and caret; .function names are resolved later (Resolve), in the
// binary.
func attachFilters(defs []Probe, synth *Synthetics, specs []FilterSpec) error {
	for _, s := range specs {
		if name, expr, ok := synth.named(s.Text); ok { // a synthetic event's records
			sy := synth.Events[name]
			if strings.TrimSpace(expr) == "0" {
				sy.Filter, sy.FilterText = nil, ""
				continue
			}
			f, err := evfilter.Parse(expr, sy.Fields(), evfilter.AnySymbols{})
			if err != nil {
				return fmt.Errorf("%s: %w", s.Origin, evfilter.EventError("synthetic", name, err))
			}
			sy.Filter, sy.FilterText = f.Program(), expr
			continue
		}
		hit, err := eventsNamed(defs, s, "filter", "GROUP/EVENT:EXPR")
		if err != nil {
			return err
		}
		_, expr, _ := strings.Cut(s.Text, ":")
		clear := strings.TrimSpace(expr) == "0"
		for _, i := range hit {
			d := &defs[i]
			if d.Handler != nil {
				return fmt.Errorf("%s: %s/%s runs a C handler and writes no records: there is nothing to filter", s.Origin, d.Def.Group, d.Def.Event)
			}
			if clear {
				d.Filter, d.FilterOrigin = "", ""
				continue
			}
			// (common_goid is known here; CompileFilter refuses it where records have none)
			if _, err := evfilter.Parse(expr, evfilter.FieldsGo(d.Def), evfilter.AnySymbols{}); err != nil {
				return filterError(s.Origin, d, expr, err)
			}
			d.Filter, d.FilterOrigin = expr, s.Origin
		}
	}
	return nil
}

// filterError reports a refused filter with its origin, its event and the kernel's
// filter-file text: the expression, a caret under the bad place, the message.
func filterError(origin string, d *Probe, expr string, err error) error {
	return fmt.Errorf("%s: %w", origin, evfilter.EventError(d.Def.Group, d.Def.Event, err))
}

// SymbolsOf finds .function names among fns, or (nil) accepts every name.
func SymbolsOf(fns *elfio.Functions) evfilter.Symbols {
	if fns == nil {
		return evfilter.AnySymbols{}
	}
	return elfsyms.Of(fns)
}

// CompileFilter parses the probe's filter against the binary's functions: its program
// for the runtime, nil when it has none. goid says whether the probe's records carry a
// goroutine id (common_goid).
func CompileFilter(d *Probe, fns *elfio.Functions, goid bool) ([]byte, error) {
	if d.Filter == "" {
		return nil, nil
	}
	f, err := evfilter.Parse(d.Filter, evfilter.EventFields(d.Def, goid), SymbolsOf(fns))
	if err != nil {
		if _, errGo := evfilter.Parse(d.Filter, evfilter.FieldsGo(d.Def), SymbolsOf(fns)); !goid && errGo == nil {
			return nil, noGoID(d.FilterOrigin, d, "filter "+strconv.Quote(d.Filter))
		}
		return nil, filterError(d.FilterOrigin, d, d.Filter, err)
	}
	return f.Program(), nil
}

// noGoID refuses what (a filter, a trigger) of probe d, given at origin, that names
// common_goid where the probe's records carry none.
func noGoID(origin string, d *Probe, what string) error {
	return fmt.Errorf("%s: %s of %s/%s names %s, but its records carry no goroutine id at %#x: only an event at a Go function of a Go program (not assembly, not in a library) has one, and none with --count-only",
		origin, what, d.Def.Group, d.Def.Event, evfilter.GoIDName, d.Addr)
}
