package cli

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

// probeDef is one event definition with where it came from and the address it resolves
// to in the binary.
type probeDef struct {
	Probe  *eventdef.Probe
	Origin string // "-e #2" or "probes.txt:7"
	Addr   uint64
	Func   *elfio.Func // function holding Addr, when known
	// Handler is the C handler file's declaration this definition stands for (--handlers).
	Handler *handlers.Probe
}

// readDefs gathers definitions from -e flags and -f files, in that order. Blank lines
// and lines starting with # are skipped in files.
func readDefs(exprs, files []string) ([]probeDef, error) {
	var defs []probeDef
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
		defs = append(defs, probeDef{Probe: p, Origin: origin})
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
	seen := map[string]string{}
	for _, d := range defs {
		key := d.Probe.Group + "/" + d.Probe.Event
		if prev, dup := seen[key]; dup {
			return nil, fmt.Errorf("%s: event %s is already defined by %s", d.Origin, key, prev)
		}
		seen[key] = d.Origin
	}
	return defs, nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// resolveDefs finds each definition's address in f: SYM+offs through the functions and
// symbols of the binary, 0xADDR as a virtual address of the binary.
func resolveDefs(f *elfio.File, fns *elfio.Functions, defs []probeDef) error {
	for i := range defs {
		d := &defs[i]
		p := d.Probe
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
