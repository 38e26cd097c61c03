package rewriter

import (
	"bytes"
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/gopclntab"
	"github.com/kprewrite/kprewrite/internal/probedefs"
)

// Goroutine ids: in a Go program, the records of an event at a Go function carry the
// goroutine that wrote them, so that readers nest calls per goroutine (a goroutine
// moves between threads). In Go's register ABI (ABIInternal) R14 holds the current g
// at every instruction of a Go function, so the id is one more fetch argument, the
// u64 at OFF(%r14) with OFF the offset of runtime.g's goid, read with a plain load
// (eventdef.AppendSafeLoad). It goes after the definition's fixed fields: those keep
// their offsets (filters, hist keys, the formatters read them unchanged) and the
// strings' data, placed by the runtime after the fixed area, is found by its offsets
// as before. Assembly (ABI0) functions have no g in R14: their events carry none.

// goidOffsets are goid's offsets in runtime.g by Go release, for programs without
// DWARF: only releases checked against their DWARF.
var goidOffsets = map[string]int{
	"go1.26": 152,
}

// goState is what a Go program's events need: its Go functions (not assembly), by
// entry, and the goid's offset in runtime.g.
type goState struct {
	funcs []gopclntab.Func
	off   int
}

// goidState returns the goroutine-id state of a Go program; nil for another program,
// or a Go program whose g layout is unknown (with a warning).
func (g *gen) goidState() *goState {
	if g.f.Section(".go.buildinfo") == nil && g.f.Section(".gopclntab") == nil {
		return nil
	}
	fns, err := g.f.GoFuncs()
	if err != nil || len(fns) == 0 {
		return nil
	}
	off, err := goidOffset(g.f.Data)
	if err != nil {
		g.warnings = append(g.warnings, fmt.Sprintf("a Go program whose records carry no goroutine id (calls nest per thread): %v", err))
		return nil
	}
	st := &goState{off: off}
	for _, fn := range fns {
		if fn.Flag&4 == 0 { // abi.FuncFlagAsm: ABI0, no g in R14
			st.funcs = append(st.funcs, fn)
		}
	}
	return st
}

// goidOffset finds the offset of goid in runtime.g: from the program's DWARF, else
// from its Go release.
func goidOffset(data []byte) (int, error) {
	if off, ok := dwarfGoidOffset(data); ok {
		return off, nil
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return 0, fmt.Errorf("no DWARF type runtime.g and no Go version: %w", err)
	}
	rel := bi.GoVersion
	if i := strings.IndexAny(rel[min(len(rel), 4):], ".-+ "); i >= 0 { // go1.26.8 -> go1.26
		rel = rel[:4+i]
	}
	if off, ok := goidOffsets[rel]; ok {
		return off, nil
	}
	return 0, fmt.Errorf("no DWARF type runtime.g, and the offset of goid in %s's is not known", bi.GoVersion)
}

// dwarfGoidOffset reads the offset of goid in the DWARF type runtime.g.
func dwarfGoidOffset(data []byte) (int, bool) {
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return 0, false
	}
	d, err := ef.DWARF()
	if err != nil {
		return 0, false
	}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			return 0, false
		}
		switch {
		case e.Tag == dwarf.TagCompileUnit && e.Val(dwarf.AttrName) != "runtime":
			r.SkipChildren()
		case e.Tag == dwarf.TagStructType && e.Val(dwarf.AttrName) == "runtime.g":
			return memberOffset(r, "goid")
		}
	}
}

// memberOffset returns the offset of the member name among the children r is at.
func memberOffset(r *dwarf.Reader, name string) (int, bool) {
	for {
		c, err := r.Next()
		if err != nil || c == nil || c.Tag == 0 {
			return 0, false
		}
		if c.Tag == dwarf.TagMember && c.Val(dwarf.AttrName) == name {
			off, ok := c.Val(dwarf.AttrDataMemberLoc).(int64)
			return int(off), ok
		}
	}
}

// isGo reports whether a is in a Go (ABIInternal) function.
func (st *goState) isGo(a uint64) bool {
	i := sort.Search(len(st.funcs), func(i int) bool { return st.funcs[i].End > a })
	return i < len(st.funcs) && st.funcs[i].Entry <= a
}

// withGoID returns p's compiled program prog with the goroutine id appended when its
// event is at a Go function and records, and 1 + the id's offset in the records' data
// (0: none). The id is read with a plain load (eventdef.StMemSafe): g is valid
// wherever Go code runs, and a read that could fault would need the fault-catching copy
// (the signal guard's Go stubs, and a signal a bad read) or a system call a record.
func (st *goState) withGoID(prog []byte, p *probedefs.Probe, countOnly bool) ([]byte, int) {
	if st == nil || countOnly || p.Handler != nil || p.Spare || p.Def.Lib != "" || !st.isGo(p.Addr) {
		return prog, 0
	}
	out, off, err := eventdef.AppendSafeLoad(prog, "r14", int32(st.off))
	if err != nil {
		return prog, 0 // (a program at MaxArgs: its records carry no id)
	}
	return out, off + 1
}
