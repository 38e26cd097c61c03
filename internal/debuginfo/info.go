package debuginfo

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/internal/ehframe"
)

// Info is the debug information of one binary.
type Info struct {
	Path   string // the file the DWARF was read from
	Binary string // the binary whose addresses it describes

	d   *dwarf.Data
	sec map[string][]byte // raw .debug_info, .debug_loc, .debug_loclists, .debug_addr

	units []*unit
	funcs []*Func // every function with code and every inlined copy, by entry address

	eh                     []byte
	ehAddr, ehText, ehData uint64
	fdes                   []ehframe.FDE
	// .debug_frame, for the functions .eh_frame does not describe (programs built
	// with -fno-asynchronous-unwind-tables)
	dframe   []byte
	dfdes    []ehframe.FDE
	split    []string    // the .dwo files of split units (not read)
	exec     [][2]uint64 // the executable segments
	objects  []object    // data symbols, for static variables
	pie      bool
	goTypes  map[string]uint64            // Go types' descriptor offsets by name (goTypeIndex)
	dynTypes map[string]map[uint64]string // DynTypes by interface
	goDwarf  map[string]dwarf.Offset      // Go's named types' DWARF entries (goTypeIndex)
}

type object struct {
	name       string
	addr, size uint64
}

// unit is one compilation unit.
type unit struct {
	cu           *dwarf.Entry
	version      int
	base         uint64 // the base address of its location lists (DW_AT_low_pc)
	addrBase     uint64
	loclistsBase uint64
	optimized    bool // compiled with optimization (-O1 and up, by DW_AT_producer)
	producer     string
	golang       bool  // DW_AT_language is Go
	lines        []Row // its line table, rows in sequence order
	files        []*dwarf.LineFile
	globals      []*dwarf.Entry // its file-scope variables
}

// Row is one row of a line table.
type Row struct {
	Addr   uint64
	File   string
	Line   int
	IsStmt bool
	End    bool // the end of a sequence (Addr is past the code)
}

// Func is a function with code: an out-of-line subprogram or an inlined copy of one.
type Func struct {
	Name     string
	File     string // where it is declared
	Line     int    // its declaration line
	Entry    uint64 // its entry address (the low address of an inlined copy's first range)
	Ranges   [][2]uint64
	Inlined  bool // an inlined copy: CallFile and CallLine say where
	CallFile string
	CallLine int

	u        *unit
	off      dwarf.Offset // its DIE
	abstract dwarf.Offset // where its name, type and parameters are declared
	outer    *Func        // the out-of-line function an inlined copy is in
}

// Optimized says the function's unit was compiled with optimization.
func (f *Func) Optimized() bool { return f.u.optimized }

// Contains says whether pc is in one of f's ranges.
func (f *Func) Contains(pc uint64) bool {
	for _, r := range f.Ranges {
		if pc >= r[0] && pc < r[1] {
			return true
		}
	}
	return false
}

// langGo is DW_LANG_Go.
const langGo = 0x16

// Go says f was compiled by Go: its parameters follow Go's register ABI, and its
// results are formal parameters with DW_AT_variable_parameter.
func (f *Func) Go() bool { return f.u.golang }

// Producer is the DW_AT_producer of f's unit (compiler and options).
func (f *Func) Producer() string { return f.u.producer }

// dwoName is the .dwo file of a split-DWARF skeleton unit, or "".
func dwoName(e *dwarf.Entry) string {
	const attrGNUDwoName = dwarf.Attr(0x2130) // DWARF 4's -gsplit-dwarf
	for _, a := range []dwarf.Attr{dwarf.AttrDwoName, attrGNUDwoName} {
		if s, ok := e.Val(a).(string); ok && s != "" {
			return s
		}
	}
	if e.Tag == dwarf.TagSkeletonUnit {
		return "(a skeleton unit)"
	}
	return ""
}

// SplitNote says, for an error about something the debug information lacks, that some
// units are split DWARF (their functions and variables are in .dwo files, which are
// not read); "" when none is.
func (in *Info) SplitNote() string {
	if len(in.split) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of its units are split DWARF, in .dwo files such as %s, which kprewrite does not read: build without -gsplit-dwarf)",
		len(in.split), in.split[0])
}

// readUnits reads the units' headers, their functions and line tables.
func (in *Info) readUnits() error {
	versions := unitVersions(in.sec["info"])
	r := in.d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("read .debug_info: %w", err)
		}
		if e == nil {
			break
		}
		if dwo := dwoName(e); dwo != "" {
			in.split = append(in.split, dwo)
		}
		if e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit {
			r.SkipChildren()
			continue
		}
		u := &unit{cu: e, version: versions[e.Offset]}
		if v, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
			u.base = v
		}
		if v, ok := e.Val(dwarf.AttrAddrBase).(int64); ok {
			u.addrBase = uint64(v)
		}
		if v, ok := e.Val(dwarf.AttrLoclistsBase).(int64); ok {
			u.loclistsBase = uint64(v)
		}
		u.producer, _ = e.Val(dwarf.AttrProducer).(string)
		u.optimized = optimizedProducer(u.producer)
		lang, _ := e.Val(dwarf.AttrLanguage).(int64)
		u.golang = lang == langGo
		in.units = append(in.units, u)
		if err := in.readLines(u); err != nil {
			return err
		}
		if !e.Children {
			continue
		}
		if err := in.readTree(r, u, nil); err != nil {
			return err
		}
	}
	sort.SliceStable(in.funcs, func(i, j int) bool { return in.funcs[i].Entry < in.funcs[j].Entry })
	return nil
}

// unitVersions maps the offset of each unit's first DIE to the unit's version.
func unitVersions(info []byte) map[dwarf.Offset]int {
	m := map[dwarf.Offset]int{}
	for off := 0; off+11 <= len(info); {
		l := uint64(binary.LittleEndian.Uint32(info[off:]))
		hdr, lenSize := 4, 4
		if l == 0xffffffff {
			if off+12 > len(info) {
				break
			}
			l, hdr, lenSize = binary.LittleEndian.Uint64(info[off+4:]), 12, 8
		}
		if l > uint64(len(info)-off-hdr) || l < 2 {
			break
		}
		v := int(binary.LittleEndian.Uint16(info[off+hdr:]))
		first := off + hdr + 2 + lenSize + 1 // DWARF 2-4: abbrev offset, address size
		if v >= 5 {
			first = off + hdr + 2 + 1 + 1 + lenSize     // unit type, address size, abbrev offset
			if t := info[off+hdr+2]; t == 2 || t == 6 { // type and split type units: signature, type offset
				first += 8 + lenSize
			} else if t == 4 || t == 5 { // skeleton and split compile units: the dwo id
				first += 8
			}
		}
		m[dwarf.Offset(first)] = v
		off += hdr + int(l)
	}
	return m
}

// optimizedProducer says whether a DW_AT_producer names an optimization level
// above -O0, as perf probe decides that a unit's prologue must be skipped.
func optimizedProducer(p string) bool {
	opt := false
	for _, w := range strings.Fields(p) {
		if strings.HasPrefix(w, "-O") {
			opt = w != "-O0"
		}
	}
	return opt
}

// readTree reads the DIEs under the current one (the reader is past it and it has
// children): functions, inlined copies, and a unit's global variables.
func (in *Info) readTree(r *dwarf.Reader, u *unit, outer *Func) error {
	for {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("read .debug_info: %w", err)
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		var f *Func
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			f = in.newFunc(u, e, outer)
		case dwarf.TagVariable:
			if outer == nil {
				u.globals = append(u.globals, e)
			}
		}
		if e.Children {
			next := outer
			if f != nil && outer == nil {
				next = f
			}
			if err := in.readTree(r, u, next); err != nil {
				return err
			}
		}
	}
}

// newFunc records a function DIE with code, or returns nil.
func (in *Info) newFunc(u *unit, e *dwarf.Entry, outer *Func) *Func {
	all, err := in.d.Ranges(e)
	if err != nil {
		return nil
	}
	var ranges [][2]uint64
	for _, r := range all {
		if r[1] > r[0] {
			ranges = append(ranges, r)
		}
	}
	if len(ranges) == 0 {
		return nil
	}
	f := &Func{Ranges: ranges, Entry: ranges[0][0], u: u, off: e.Offset, abstract: e.Offset, outer: outer}
	for _, r := range ranges {
		f.Entry = min(f.Entry, r[0])
	}
	if v, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
		f.Entry = v
	}
	if v, ok := e.Val(dwarf.AttrEntrypc).(uint64); ok {
		f.Entry = v
	}
	decl := e
	for i := 0; i < 4; i++ { // abstract origin, then specification
		ref, ok := decl.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			if ref, ok = decl.Val(dwarf.AttrSpecification).(dwarf.Offset); !ok {
				break
			}
		}
		if i == 0 {
			f.abstract = ref
		}
		if d := in.entryAt(ref); d != nil {
			if f.Name == "" {
				f.Name, _ = d.Val(dwarf.AttrName).(string)
			}
			decl = d
			continue
		}
		break
	}
	if n, ok := e.Val(dwarf.AttrName).(string); ok {
		f.Name = n
	}
	if f.Name == "" {
		f.Name, _ = decl.Val(dwarf.AttrName).(string)
	}
	f.File = in.fileName(u, decl.Val(dwarf.AttrDeclFile))
	if l, ok := decl.Val(dwarf.AttrDeclLine).(int64); ok {
		f.Line = int(l)
	}
	if e.Tag == dwarf.TagInlinedSubroutine {
		f.Inlined = true
		f.CallFile = in.fileName(u, e.Val(dwarf.AttrCallFile))
		if l, ok := e.Val(dwarf.AttrCallLine).(int64); ok {
			f.CallLine = int(l)
		}
	} else {
		f.outer = nil
	}
	if f.Name == "" {
		return nil
	}
	in.funcs = append(in.funcs, f)
	return f
}

// entryAt reads the DIE at off.
func (in *Info) entryAt(off dwarf.Offset) *dwarf.Entry {
	r := in.d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil {
		return nil
	}
	return e
}

// fileName is the name of file index v of u's line table.
func (in *Info) fileName(u *unit, v any) string {
	i, ok := v.(int64)
	if !ok {
		return ""
	}
	files := u.files
	if i < 0 || int(i) >= len(files) || files[i] == nil {
		return ""
	}
	return files[i].Name
}

// readLines reads u's line table.
func (in *Info) readLines(u *unit) error {
	lr, err := in.d.LineReader(u.cu)
	if err != nil {
		return fmt.Errorf("line table of %s: %w", u.cu.Val(dwarf.AttrName), err)
	}
	if lr == nil {
		return nil
	}
	u.files = lr.Files()
	var le dwarf.LineEntry
	for {
		if err := lr.Next(&le); err != nil {
			break
		}
		name := ""
		if le.File != nil {
			name = le.File.Name
		}
		u.lines = append(u.lines, Row{Addr: le.Address, File: name, Line: le.Line, IsStmt: le.IsStmt, End: le.EndSequence})
	}
	return nil
}

// Funcs returns the functions (out-of-line and inlined copies) named name, in
// address order; with file, only those declared in a file matching it.
func (in *Info) Funcs(name, file string) []*Func {
	var out []*Func
	for _, f := range in.funcs {
		if f.Name == name && (file == "" || SameFile(f.File, file)) {
			out = append(out, f)
		}
	}
	return out
}

// FuncAt returns the innermost function (an inlined copy if pc is in one) holding pc.
func (in *Info) FuncAt(pc uint64) *Func {
	if fs := in.FramesAt(pc); len(fs) > 0 {
		return fs[0]
	}
	return nil
}

// FramesAt returns the function copies holding pc, innermost first: an inlined
// copy, the copies it is inlined in, then the out-of-line function.
func (in *Info) FramesAt(pc uint64) []*Func {
	var out []*Func
	for _, f := range in.funcs {
		if f.Contains(pc) {
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return inside(out[i], out[j]) && !inside(out[j], out[i]) })
	return out
}

// inside says whether f is nested in g (an inlined copy in it).
func inside(f, g *Func) bool {
	return f.Inlined && (!g.Inlined || spans(g, f))
}

// spans says whether every range of inner is inside a range of outer.
func spans(outer, inner *Func) bool {
	for _, r := range inner.Ranges {
		ok := false
		for _, o := range outer.Ranges {
			if r[0] >= o[0] && r[1] <= o[1] {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// SameFile says whether a source file name from the debug information matches
// what a user wrote: the same path, or a path ending in "/"+want.
func SameFile(have, want string) bool {
	if have == "" || want == "" {
		return false
	}
	have, want = filepath.Clean(have), filepath.Clean(want)
	return have == want || strings.HasSuffix(have, "/"+want)
}

// LineAddrs returns the addresses where the code of file:line starts: every
// is_stmt row of that line whose previous row in the sequence is of another line
// (rows of one line that follow each other are one place), in address order. files
// lists the distinct source files that matched.
func (in *Info) LineAddrs(file string, line int) (addrs []uint64, files []string) {
	seen := map[uint64]bool{}
	fileSeen := map[string]bool{}
	for _, u := range in.units {
		prevSame := false
		for _, r := range u.lines {
			same := !r.End && r.Line == line && SameFile(r.File, file)
			if same && r.IsStmt && !prevSame && !seen[r.Addr] {
				seen[r.Addr] = true
				addrs = append(addrs, r.Addr)
				if !fileSeen[r.File] {
					fileSeen[r.File] = true
					files = append(files, r.File)
				}
			}
			prevSame = same
			if r.End {
				prevSame = false
			}
		}
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	return addrs, files
}

// Lines returns the line-table rows (is_stmt, not sequence ends) inside f's ranges,
// in address order: the places a line probe can go.
func (in *Info) Lines(f *Func) []Row {
	var out []Row
	for _, r := range f.u.lines {
		if r.End || !r.IsStmt || !f.Contains(r.Addr) {
			continue
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// LineAt returns the line-table row in force at pc, if any.
func (in *Info) LineAt(pc uint64) (Row, bool) {
	for _, u := range in.units {
		for i, r := range u.lines {
			if r.End || r.Addr > pc {
				continue
			}
			if i+1 < len(u.lines) && u.lines[i+1].Addr > pc {
				return r, true
			}
		}
	}
	return Row{}, false
}

// NextDeclLine is the declaration line of the next function declared after f in
// f's file, or 0: f's own lines end before it (the rows of an inlined copy also
// carry its caller's lines).
func (in *Info) NextDeclLine(f *Func) int {
	next := 0
	for _, g := range in.funcs {
		if g.Line > f.Line && g.File == f.File && (next == 0 || g.Line < next) {
			next = g.Line
		}
	}
	return next
}

// AfterPrologue returns the address of f's first line-table row past its entry
// (where gdb puts a breakpoint on f, and perf probe on f in unoptimized code), or
// f's entry if it has none.
func (in *Info) AfterPrologue(f *Func) uint64 {
	rows := in.Lines(f)
	var first Row
	for _, r := range rows {
		if r.Addr == f.Entry {
			first = r
			continue
		}
		if r.Addr > f.Entry && (first.Line == 0 || r.Line != first.Line || r.File != first.File) {
			return r.Addr
		}
	}
	return f.Entry
}

// DataSymbol names the link-time data address addr as a @SYM fetcharg names it:
// "SYM" or "SYM+OFF" for the data symbol holding it, or "0xADDR" in a program that
// is not position-independent (where the address is the run-time one).
func (in *Info) DataSymbol(addr uint64) (string, bool) {
	for _, o := range in.objects {
		if addr >= o.addr && (addr < o.addr+o.size || addr == o.addr) {
			if addr == o.addr {
				return o.name, true
			}
			return fmt.Sprintf("%s+%d", o.name, addr-o.addr), true
		}
	}
	if !in.pie {
		return fmt.Sprintf("%#x", addr), true
	}
	return "", false
}

// ReturnType is the type f returns (nil for void or when unknown).
func (in *Info) ReturnType(f *Func) dwarf.Type {
	for _, off := range []dwarf.Offset{f.off, f.abstract} {
		e := in.entryAt(off)
		if e == nil {
			continue
		}
		if t, ok := e.Val(dwarf.AttrType).(dwarf.Offset); ok {
			if ty, err := in.d.Type(t); err == nil {
				return ty
			}
		}
	}
	return nil
}
