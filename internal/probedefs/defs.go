package probedefs

import (
	"debug/elf"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/handlers"
	"github.com/kprewrite/kprewrite/internal/infile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// ParseDefs parses event definitions from exprs (origin "-e #N") and from files, one a
// line (origin "FILE:LINE"; blank lines and lines starting with # are skipped), in that
// order, as the kernel reads writes to its events file (eventdef.Set): "-:GRP/EV"
// deletes an event defined before it, and a second definition of an event adds a probe
// point to it when its kind and arguments agree (a multi-probe event). The probes are
// not resolved yet (Resolve). A definition that does not parse or does not agree is
// reported with its origin and the kernel's caret under the bad place.
//
// A definitions file's line "filter GROUP/EVENT:EXPR" and each of filters ("--filter
// #N", applied after the files) give an event its filter (see attachFilters); its
// lines "trigger GROUP/EVENT:TRIGGER" and each of triggers ("--trigger #N", after the
// files) its triggers (see attachTriggers).
//
// src, when not nil, first turns each source-level definition (srcprobe) into
// kernel-form ones: one per probed address, of one event.
//
// A definition "s:[synthetic/]NAME TYPE FIELD[; TYPE FIELD...]" (the kernel's
// dynamic_events form) defines a synthetic event, which hist triggers' onmatch()
// actions generate and which takes hist triggers ("synthetic/NAME:hist:...").
func ParseDefs(exprs, files, filters, triggers []string, src Translator) ([]Probe, *Synthetics, error) {
	var set eventdef.Set
	var specs, tspecs []FilterSpec
	synth := &Synthetics{Events: map[string]*evhist.Synthetic{}}
	origin := map[*eventdef.Probe]string{}
	add := func(text, where string) error {
		if strings.HasPrefix(text, "s:") {
			sy, err := evhist.ParseSynthetic(strings.Replace(text, "s:synthetic/", "s:", 1))
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if synth.Events[sy.Name] != nil {
				return fmt.Errorf("%s: synthetic event %s is defined twice", where, sy.Name)
			}
			synth.Events[sy.Name] = sy
			synth.Order = append(synth.Order, sy.Name)
			return nil
		}
		texts := []string{text}
		if src != nil {
			t, err := src(text)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if t != nil {
				texts = t
			}
		}
		for _, text := range texts {
			p, _, err := set.Add(text)
			if err != nil {
				if len(texts) > 1 || texts[0] != text {
					return defError(where, err, "in its kernel form "+text)
				}
				return defError(where, err, "")
			}
			origin[p] = where
		}
		return nil
	}
	for i, e := range exprs {
		if err := add(e, fmt.Sprintf("-e #%d", i+1)); err != nil {
			return nil, nil, err
		}
	}
	for _, name := range files {
		data, err := infile.ReadFile(name)
		if err != nil {
			return nil, nil, fmt.Errorf("read definitions: %w", err)
		}
		// the file is in memory: its lines are split there, with no limit on a line's
		// length (a bufio.Scanner refused a long filter line without saying which)
		for i, raw := range strings.Split(string(data), "\n") {
			line := i + 1
			text := strings.TrimSpace(raw)
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			if f, ok := strings.CutPrefix(text, "filter "); ok {
				specs = append(specs, FilterSpec{Origin: fmt.Sprintf("%s:%d", name, line), Text: strings.TrimSpace(f)})
				continue
			}
			if t, ok := strings.CutPrefix(text, "trigger "); ok {
				tspecs = append(tspecs, FilterSpec{Origin: fmt.Sprintf("%s:%d", name, line), Text: strings.TrimSpace(t)})
				continue
			}
			if err := add(text, fmt.Sprintf("%s:%d", name, line)); err != nil {
				return nil, nil, err
			}
		}
	}
	defs := make([]Probe, 0, len(set.Probes))
	for _, p := range set.Probes {
		defs = append(defs, Probe{Def: p, Origin: origin[p]})
	}
	for i, f := range filters {
		specs = append(specs, FilterSpec{Origin: fmt.Sprintf("--filter #%d", i+1), Text: f})
	}
	if err := attachFilters(defs, synth, specs); err != nil {
		return nil, nil, err
	}
	for i, t := range triggers {
		tspecs = append(tspecs, FilterSpec{Origin: fmt.Sprintf("--trigger #%d", i+1), Text: t})
	}
	if err := attachTriggers(defs, synth, tspecs); err != nil {
		return nil, nil, err
	}
	if err := checkNamedHists(defs, synth); err != nil {
		return nil, nil, err
	}
	if err := linkHists(defs, synth); err != nil {
		return nil, nil, err
	}
	return defs, synth, nil
}

// Translator turns a source-level definition into kernel-form ones, or returns nil
// for a definition that is not source-level (srcprobe.Resolver.Translate).
type Translator func(def string) ([]string, error)

// defError reports a definition's error with its origin; a *eventdef.ParseError gets
// the kernel's caret, and detail (if any) says more after its message.
func defError(origin string, err error, detail string) error {
	var pe *eventdef.ParseError
	if errors.As(err, &pe) {
		msg := err.Error()
		if detail != "" {
			msg += " (" + detail + ")"
		}
		return fmt.Errorf("%s: %s\n%s", origin, msg, indent(pe.Caret()))
	}
	return fmt.Errorf("%s: %w", origin, err)
}

// HandlerDefs appends the probes a compiled C handler set declares to defs, as
// definitions resolved like -e ones ("p:handlers/NAME SITE", origin "FILE:LINE (NAME)").
func HandlerDefs(defs []Probe, set *handlers.Set) ([]Probe, error) {
	if set == nil {
		return defs, nil
	}
	first := len(defs)
	for i := range set.Probes {
		p := &set.Probes[i]
		ev, err := p.Event()
		if err != nil {
			return nil, err
		}
		defs = append(defs, Probe{Def: ev, Origin: p.Origin(), Handler: p})
	}
	if err := checkHandlerNames(defs, first); err != nil {
		return nil, err
	}
	return defs, nil
}

// checkHandlerNames refuses a C handler's probe whose event name another definition
// has: a handler's probe is its own event (the multi-probe events of ParseDefs are
// for definitions only).
func checkHandlerNames(defs []Probe, first int) error {
	seen := make(map[string]string, len(defs))
	for i, d := range defs {
		key := d.Def.Group + "/" + d.Def.Event
		if prev, dup := seen[key]; dup && i >= first {
			return fmt.Errorf("%s: event %s is already defined by %s", d.Origin, key, prev)
		}
		if _, dup := seen[key]; !dup {
			seen[key] = d.Origin
		}
	}
	return nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// SymbolTable maps the names of the symbols f defines to their values (a symbol of the
// static table over a dynamic one of the same name): what @SYM fetchargs and the C
// handlers' program symbols name.
func SymbolTable(f *elfio.File) map[string]uint64 {
	syms := map[string]uint64{}
	for _, s := range f.Symbols {
		if s.Name == "" || s.Shndx == uint16(elf.SHN_UNDEF) || s.Type == elf.STT_SECTION || s.Type == elf.STT_FILE {
			continue
		}
		if _, dup := syms[s.Name]; !dup || !s.Dynamic {
			syms[s.Name] = s.Value
		}
	}
	return syms
}

// Resolve finds each definition's address in f: SYM+offs through the functions and
// symbols of the binary, 0xADDR as a virtual address of the binary. It sets Addr and
// Func of every probe. It then checks what the rewrite would refuse later, so that
// check and rewrite answer a definition the same way: each event's fetch program
// compiles against the binary's symbols, and no site has more probes than a
// probepoint holds.
func Resolve(f *elfio.File, fns *elfio.Functions, defs []Probe) error {
	if err := resolveAddrs(f, fns, defs); err != nil {
		return err
	}
	var syms map[string]uint64 // made at the first @SYM fetcharg
	lookup := func(sym string) (uint64, bool) {
		if syms == nil {
			syms = SymbolTable(f)
		}
		a, ok := syms[sym]
		return a, ok
	}
	perSite := map[uint64]int{}
	for i := range defs {
		d := &defs[i]
		if _, err := eventdef.Compile(d.Def, lookup); err != nil {
			return fmt.Errorf("%s: %w", d.Origin, err)
		}
		// (the rewrite knows which records carry a goroutine id, and checks again)
		if _, err := CompileFilter(d, fns, true); err != nil {
			return err
		}
		if _, _, err := CompileTriggers(d, true, SymbolsOf(fns), 0, nil, func(string, uint32) uint32 { return 0 }, func(string, string) []uint32 { return nil }); err != nil {
			return err
		}
		if perSite[d.Addr]++; perSite[d.Addr] > kprt.MaxProbesPerPoint {
			return fmt.Errorf("%s: %s is the %d%s probe on %#x; a probe site holds at most %d",
				d.Origin, d.Def.Group+"/"+d.Def.Event, perSite[d.Addr], ordinalSuffix(perSite[d.Addr]), d.Addr, kprt.MaxProbesPerPoint)
		}
	}
	return nil
}

func ordinalSuffix(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return "th"
	case n%10 == 1:
		return "st"
	case n%10 == 2:
		return "nd"
	case n%10 == 3:
		return "rd"
	}
	return "th"
}

// SplitLibraries separates the definitions of the program's own code from those that
// name a library (LIB:SITE), grouped by library in order of first appearance.
func SplitLibraries(defs []Probe) (own []Probe, libs []LibraryDefs) {
	at := map[string]int{}
	for _, d := range defs {
		lib := d.Def.Lib
		if lib == "" {
			own = append(own, d)
			continue
		}
		i, ok := at[lib]
		if !ok {
			i = len(libs)
			at[lib] = i
			libs = append(libs, LibraryDefs{Lib: lib})
		}
		libs[i].Defs = append(libs[i].Defs, d)
	}
	return own, libs
}

// LibraryDefs are the definitions naming one library, as written (a path or a soname).
type LibraryDefs struct {
	Lib  string
	Defs []Probe
}

// Resolve's LIB:SITE definitions are resolved against the library's file (f), where a
// number is a file offset, as uprobe_events take it.
func resolveAddrs(f *elfio.File, fns *elfio.Functions, defs []Probe) error {
	var byName map[string][]elfio.Symbol // the defined symbols, made at the first name
	for i := range defs {
		d := &defs[i]
		p := d.Def
		if p.Symbol == "" {
			d.Addr = p.Addr
			where := fmt.Sprintf("%#x", d.Addr)
			if p.Lib != "" { // a file offset
				a, err := f.Addr(p.Addr)
				if err != nil {
					return defError(d.Origin, p.ErrAt(1, 0, eventdef.ErrBadProbeAddr), err.Error())
				}
				d.Addr, where = a, fmt.Sprintf("file offset %#x (%#x)", p.Addr, a)
			}
			if !f.ExecAddr(d.Addr) {
				return defError(d.Origin, p.ErrAt(1, 0, eventdef.ErrBadProbeAddr),
					fmt.Sprintf("%s is not in an executable segment of %s", where, f.Path))
			}
			d.Func, _ = fns.Containing(d.Addr)
			continue
		}
		if byName == nil {
			byName = definedSymbols(f)
		}
		base, code, why := symbolAddr(f, fns, byName[p.Symbol], p.Symbol)
		if code == eventdef.ErrBadProbeAddr { // not there: where it is, or what was meant
			why += missingHint(f, byName, p.Symbol)
		}
		if code != 0 {
			return defError(d.Origin, p.ErrAt(1, 0, code), why)
		}
		d.Addr = base + p.Offset
		d.Func, _ = fns.Containing(d.Addr)
		if d.Func == nil || !f.ExecAddr(d.Addr) {
			return defError(d.Origin, p.ErrAt(1, 0, eventdef.ErrBadProbeAddr),
				fmt.Sprintf("%s+%#x (%#x) is not inside a function of %s", p.Symbol, p.Offset, d.Addr, f.Path))
		}
		if p.Return && d.Addr != d.Func.Addr {
			return defError(d.Origin, p.ErrAt(1, 0, eventdef.ErrBadRetprobe),
				fmt.Sprintf("%s+%#x is not the entry of %s", p.Symbol, p.Offset, d.Func.Name))
		}
	}
	return nil
}

// symbolAddr finds the function or symbol name in f, as the kernel's kprobes find a
// symbol: one that is not there is ErrBadProbeAddr; one that names local functions in
// two places (static functions of one name in two files) and no global one is
// ErrNonUniqSymbol, since probing the first silently would trace the wrong one. A
// global function of the name is the one meant (the linker allows one), whatever
// local functions share it (a static C library's). syms are the defined symbols of the
// name. A failure is the code and why, in words.
func symbolAddr(f *elfio.File, fns *elfio.Functions, syms []elfio.Symbol, name string) (uint64, eventdef.ErrorCode, string) {
	var locals, globals []uint64
	for _, s := range syms {
		if s.Type != elf.STT_FUNC {
			continue
		}
		if s.Bind == elf.STB_LOCAL {
			if !slices.Contains(locals, s.Value) {
				locals = append(locals, s.Value)
			}
		} else if !slices.Contains(globals, s.Value) {
			globals = append(globals, s.Value)
		}
	}
	if len(globals) == 1 {
		return globals[0], 0, ""
	}
	if all := append(globals, locals...); len(all) > 1 {
		slices.Sort(all)
		places := make([]string, len(all))
		for i, a := range all {
			places[i] = fmt.Sprintf("%#x", a)
		}
		return 0, eventdef.ErrNonUniqSymbol, fmt.Sprintf("%s is at %s in %s; give the address (p:EVENT 0xADDR)",
			name, strings.Join(places, " and "), f.Path)
	}
	if fn, found := fns.ByName(name); found {
		return fn.Addr, 0, ""
	}
	if len(syms) > 0 {
		return syms[0].Value, 0, ""
	}
	return 0, eventdef.ErrBadProbeAddr, fmt.Sprintf("no symbol %s in %s", name, f.Path)
}

// definedSymbols indexes f's defined symbols (a value, a section) by name, in table
// order.
func definedSymbols(f *elfio.File) map[string][]elfio.Symbol {
	m := map[string][]elfio.Symbol{}
	for _, s := range f.Symbols {
		if s.Name != "" && s.Value != 0 && s.Shndx != 0 {
			m[s.Name] = append(m[s.Name], s)
		}
	}
	return m
}
