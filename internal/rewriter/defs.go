package rewriter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/handlers"
)

// ParseDefs parses event definitions from exprs (origin "-e #N") and from files, one a
// line (origin "FILE:LINE"; blank lines and lines starting with # are skipped), in that
// order. The probes are not resolved yet (Resolve). A definition that does not parse
// is reported with its origin and the kernel's caret under the bad place.
func ParseDefs(exprs, files []string) ([]Probe, error) {
	var defs []Probe
	add := func(text, origin string) error {
		p, err := eventdef.Parse(text)
		if err != nil {
			var pe *eventdef.ParseError
			if errors.As(err, &pe) {
				return fmt.Errorf("%s: %s\n%s", origin, err, indent(pe.Caret()))
			}
			return fmt.Errorf("%s: %w", origin, err)
		}
		if p.Delete {
			return fmt.Errorf("%s: %q deletes an event; kprewrite only takes probe definitions", origin, text)
		}
		defs = append(defs, Probe{Def: p, Origin: origin})
		return nil
	}
	for i, e := range exprs {
		if err := add(e, fmt.Sprintf("-e #%d", i+1)); err != nil {
			return nil, err
		}
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read definitions: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			if err := add(text, fmt.Sprintf("%s:%d", name, line)); err != nil {
				return nil, err
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read definitions %s: %w", name, err)
		}
	}
	if err := checkUnique(defs); err != nil {
		return nil, err
	}
	return defs, nil
}

// HandlerDefs appends the probes a compiled C handler set declares to defs, as
// definitions resolved like -e ones ("p:handlers/NAME SITE", origin "FILE:LINE (NAME)").
func HandlerDefs(defs []Probe, set *handlers.Set) ([]Probe, error) {
	if set == nil {
		return defs, nil
	}
	for i := range set.Probes {
		p := &set.Probes[i]
		ev, err := p.Event()
		if err != nil {
			return nil, err
		}
		defs = append(defs, Probe{Def: ev, Origin: p.Origin(), Handler: p})
	}
	if err := checkUnique(defs); err != nil {
		return nil, err
	}
	return defs, nil
}

// checkUnique refuses a second definition of an event name.
func checkUnique(defs []Probe) error {
	seen := make(map[string]string, len(defs))
	for _, d := range defs {
		key := d.Def.Group + "/" + d.Def.Event
		if prev, dup := seen[key]; dup {
			return fmt.Errorf("%s: event %s is already defined by %s", d.Origin, key, prev)
		}
		seen[key] = d.Origin
	}
	return nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// Resolve finds each definition's address in f: SYM+offs through the functions and
// symbols of the binary, 0xADDR as a virtual address of the binary. It sets Addr and
// Func of every probe.
func Resolve(f *elfio.File, fns *elfio.Functions, defs []Probe) error {
	for i := range defs {
		d := &defs[i]
		p := d.Def
		if p.Symbol == "" {
			d.Addr = p.Addr
			if !f.ExecAddr(d.Addr) {
				return fmt.Errorf("%s: address %#x is not in an executable segment of %s", d.Origin, d.Addr, f.Path)
			}
			d.Func, _ = fns.Containing(d.Addr)
			continue
		}
		base, ok := uint64(0), false
		if fn, found := fns.ByName(p.Symbol); found {
			base, ok = fn.Addr, true
		} else {
			for _, s := range f.Symbols {
				if s.Name == p.Symbol && s.Value != 0 && s.Shndx != 0 {
					base, ok = s.Value, true
					break
				}
			}
		}
		if !ok {
			return fmt.Errorf("%s: symbol %q not found in %s", d.Origin, p.Symbol, f.Path)
		}
		d.Addr = base + p.Offset
		d.Func, _ = fns.Containing(d.Addr)
		if d.Func == nil || !f.ExecAddr(d.Addr) {
			return fmt.Errorf("%s: %s+%#x (%#x) is not inside a function of %s", d.Origin, p.Symbol, p.Offset, d.Addr, f.Path)
		}
		if p.Return && d.Addr != d.Func.Addr {
			return fmt.Errorf("%s: a return probe must be on a function entry, and %s+%#x is not one", d.Origin, p.Symbol, p.Offset)
		}
	}
	return nil
}
