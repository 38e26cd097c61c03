package srcprobe

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kprewrite/kprewrite/internal/debuginfo"
)

// part is one piece of a value split in pieces (DW_OP_piece, or Go's register
// ABI): bytes [off, off+size) of the value are at loc.
type part struct {
	off, size int64
	loc       debuginfo.Loc
}

// partsOf lays out the pieces of a value of type t: one after the other, as DWARF
// says, unless they are t's scalar fields one by one without its padding, as Go's
// compiler describes a struct in registers (struct{int8; bool; float32} is three
// pieces of 1, 1 and 4 bytes, the float32 at offset 4).
func partsOf(pieces []debuginfo.Loc, t dwarf.Type) []part {
	var out []part
	var off int64
	for _, l := range pieces {
		out = append(out, part{off: off, size: int64(l.Piece), loc: l})
		off += int64(l.Piece)
	}
	var lv []part
	if t == nil || !leaves(t, 0, &lv, 0) || len(lv) != len(out) {
		return out
	}
	for i := range lv {
		if lv[i].size != out[i].size {
			return out
		}
	}
	for i := range out {
		out[i].off = lv[i].off
	}
	return out
}

// leaves appends the offset and size of each scalar of a value of type t, in
// order; false for a type with an array of more than one element (never in
// registers) or nothing known.
func leaves(t dwarf.Type, off int64, out *[]part, depth int) bool {
	if depth > 8 {
		return false
	}
	switch x := strip(t).(type) {
	case *dwarf.StructType:
		for _, f := range x.Field {
			if !leaves(f.Type, off+f.ByteOffset, out, depth+1) {
				return false
			}
		}
		return true
	case *dwarf.ArrayType:
		switch x.Count {
		case 0:
			return true
		case 1:
			return leaves(x.Type, off, out, depth+1)
		}
		return false
	case *dwarf.ComplexType:
		h := x.ByteSize / 2
		*out = append(*out, part{off: off, size: h}, part{off: off + h, size: h})
		return true
	case nil:
		return false
	}
	if size := t.Size(); size > 0 && size <= 8 {
		*out = append(*out, part{off: off, size: size})
		return true
	}
	return false
}

// sub is the place of bytes [off, off+size) of p, read as typ: a member of a
// struct, a word of a string, wherever the value is.
func (p place) sub(off int64, typ dwarf.Type) (place, error) {
	size := typ.Size()
	switch {
	case p.addr != nil:
		return offsetBy(place{typ: typ, addr: p.addr}, off), nil
	case p.parts != nil:
		for _, pt := range p.parts {
			if pt.off != off || pt.size < size {
				continue
			}
			if pt.loc.Empty() {
				return place{}, fmt.Errorf("%w: this piece is optimized out here", debuginfo.ErrUnavailable)
			}
			return place{typ: typ, reg: pt.loc.Reg, value: pt.loc.Value, addr: pt.loc.Addr}, nil
		}
		if inner := partsIn(p.parts, off, size); inner != nil { // a struct member in pieces
			return place{typ: typ, parts: inner}, nil
		}
		return place{}, fmt.Errorf("bytes %d-%d are not in one piece here", off, off+size)
	case off == 0 && (p.reg != nil || p.value != nil):
		return place{typ: typ, reg: p.reg, value: p.value}, nil
	}
	return place{}, fmt.Errorf("the aggregate is not in memory here")
}

// partsIn are the parts that tile [off, off+size) exactly, counted from off; nil if
// they do not.
func partsIn(parts []part, off, size int64) []part {
	var out []part
	at := off
	for _, pt := range parts {
		if pt.off < off || pt.off+pt.size > off+size {
			continue
		}
		if pt.off != at {
			return nil
		}
		pt.off -= off
		out = append(out, pt)
		at += pt.size
	}
	if at != off+size || len(out) < 2 {
		return nil
	}
	return out
}

// goKind classifies the Go types that print otherwise than their layout says.
type goKind int

const (
	goPlain goKind = iota
	goString
	goSlice
	goIface // runtime.iface: {itab, data}; the dynamic type is itab's second word
	goEface // runtime.eface (any): {type, data}
	goMap   // map[K]V: a pointer to the map's header, whose first word is its length
)

// kindOf recognizes Go's strings, slices, interfaces and maps by their DWARF layout
// (Go's compiler names them so: "string", "[]T", runtime.iface, runtime.eface, and
// "map[K]V" for a pointer to a header that starts with the count: go1.24's swiss map
// "used", the older hmap's "count").
func kindOf(t dwarf.Type) goKind {
	if isGoMap(t) {
		return goMap
	}
	st, ok := strip(t).(*dwarf.StructType)
	if !ok {
		return goPlain
	}
	switch {
	case st.StructName == "string" && fieldNames(st) == "str,len":
		return goString
	case strings.HasPrefix(st.StructName, "[]") && fieldNames(st) == "array,len,cap":
		return goSlice
	case st.StructName == "runtime.iface" || fieldNames(st) == "tab,data":
		return goIface
	case st.StructName == "runtime.eface" || fieldNames(st) == "_type,data":
		return goEface
	}
	return goPlain
}

func isGoMap(t dwarf.Type) bool {
	td, ok := t.(*dwarf.TypedefType)
	if !ok || !strings.HasPrefix(td.Name, "map[") {
		return false
	}
	pt, ok := strip(td.Type).(*dwarf.PtrType)
	if !ok {
		return false
	}
	st, ok := strip(pt.Type).(*dwarf.StructType)
	if !ok || len(st.Field) == 0 {
		return false
	}
	f := st.Field[0]
	return (f.Name == "used" || f.Name == "count") && f.ByteOffset == 0 && f.Type.Size() == 8
}

func fieldNames(st *dwarf.StructType) string {
	var n []string
	for _, f := range st.Field {
		n = append(n, f.Name)
	}
	return strings.Join(n, ",")
}

// fetchCtx is what rendering values needs besides their places.
type fetchCtx struct {
	sym    symbolizer
	golang bool            // the function is Go's: Go's values print as Go's
	in     *debuginfo.Info // for interfaces' dynamic type names (nil: none)
	tables map[string]string
}

func newFetchCtx(in *debuginfo.Info, golang bool) *fetchCtx {
	return &fetchCtx{sym: in.DataSymbol, golang: golang, in: in, tables: map[string]string{}}
}

// dynTable is the enum table that names an interface type's dynamic types
// ({nil=0,main.T=ADDR,...}); {nil=0} when they cannot be known: a value then prints
// as its descriptor's address.
func (cx *fetchCtx) dynTable(t dwarf.Type) string {
	td, ok := t.(*dwarf.TypedefType)
	if !ok || cx.in == nil {
		return "{nil=0}"
	}
	if tb, ok := cx.tables[td.Name]; ok {
		return tb
	}
	names, err := cx.in.DynTypes(td.Name)
	tb := "{nil=0}"
	if err == nil && len(names) > 0 {
		addrs := make([]uint64, 0, len(names))
		for a := range names {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		var b strings.Builder
		b.WriteString("{nil=0")
		for _, a := range addrs {
			fmt.Fprintf(&b, ",%s=%#x", names[a], a)
		}
		tb = b.String() + "}"
	}
	cx.tables[td.Name] = tb
	return tb
}

// field is one fetcharg: NAME=BODY:TYPE.
type field struct{ name, body, typ string }

// sliceElems is how many elements of a slice are fetched: its first ones.
const sliceElems = 4

// maxStructFields bounds the fields a struct by value expands to.
const maxStructFields = 16

// fields renders the value at p as fetchargs named name: one for a scalar or a
// string, and for Go's values (golang: the unit is Go's) a slice as its length and
// first elements, an interface as its dynamic type, a struct by value as its
// fields (NAME_FIELD).
func fields(name string, p place, userType string, cx *fetchCtx) ([]field, error) {
	sym := cx.sym
	if userType != "" || !cx.golang {
		body, typ, err := p.fetch(userType, sym)
		return []field{{name, body, typ}}, err
	}
	switch kindOf(p.typ) {
	case goString:
		body, err := goStringBody(p, sym)
		return []field{{name, body, "gostring"}}, err
	case goSlice:
		return sliceFields(name, p, sym)
	case goIface, goEface:
		if tb, ok := cx.errTable(p.typ); ok {
			body, err := goErrBody(p, sym)
			return []field{{name, body, "goerr" + tb}}, err
		}
		body, err := dynTypeBody(p, sym)
		return []field{{name, body, "x64" + cx.dynTable(p.typ)}}, err
	case goMap:
		body, err := mapLenBody(p, sym)
		return []field{{name + "_len", body, "s64"}}, err
	}
	switch st := strip(p.typ).(type) {
	case *dwarf.StructType:
		if p.piece == 0 {
			return structFields(name, p, st, cx)
		}
	case *dwarf.FuncType: // a func value: a pointer to its closure
		body, typ, err := p.fetch("x64", sym)
		return []field{{name, body, typ}}, err
	}
	body, typ, err := p.fetch("", sym)
	return []field{{name, body, typ}}, err
}

// word is the place of the pointer-sized word at off of p.
func (p place) word(off int64) (place, error) {
	return p.sub(off, &dwarf.UintType{BasicType: dwarf.BasicType{CommonType: dwarf.CommonType{ByteSize: 8, Name: "uintptr"}}})
}

// wordBody is the fetch body of the word at off of p.
func (p place) wordBody(off int64, sym symbolizer) (string, error) {
	w, err := p.word(off)
	if err != nil {
		return "", err
	}
	body, _, err := w.fetch("", sym)
	return body, err
}

// goStringBody is a gostring's body: the header's address when the string is in
// memory, else its pointer and length words.
func goStringBody(p place, sym symbolizer) (string, error) {
	if p.addr != nil {
		return memBody(p.addr, sym)
	}
	ptr, err := p.wordBody(0, sym)
	if err != nil {
		return "", err
	}
	n, err := p.wordBody(8, sym)
	if err != nil {
		return "", err
	}
	return ptr + "," + n, nil
}

// sliceFields are a slice's length (NAME_len) and its first elements (NAME), never
// read past its length (PTR,LEN:TYPE[N]: zeros after it).
func sliceFields(name string, p place, sym symbolizer) ([]field, error) {
	n, err := p.wordBody(8, sym)
	if err != nil {
		return nil, err
	}
	out := []field{{name + "_len", n, "s64"}}
	st := strip(p.typ).(*dwarf.StructType)
	pt, ok := strip(st.Field[0].Type).(*dwarf.PtrType)
	if !ok {
		return out, nil
	}
	et, err := scalarType(pt.Type)
	if err != nil || pt.Type.Size() <= 0 {
		return out, nil // elements of aggregate types: index them (NAME[N])
	}
	ptr, err := p.wordBody(0, sym)
	if err != nil {
		return nil, err
	}
	return append(out, field{name, ptr + "," + n, withCount(et, sliceElems)}), nil
}

// mapLenBody reads a map's length: the first word of its header; a nil map's read of
// address 0 faults and stores 0, its length.
func mapLenBody(p place, sym symbolizer) (string, error) {
	base, err := p.valueExpr()
	if err != nil {
		return "", err
	}
	return memBody(base, sym)
}

// dynTypeBody reads an interface's dynamic type: the type descriptor's address
// (0 for nil), the eface's first word or the itab's second.
func dynTypeBody(p place, sym symbolizer) (string, error) {
	if kindOf(p.typ) == goEface {
		return p.wordBody(0, sym)
	}
	tab, err := p.word(0)
	if err != nil {
		return "", err
	}
	base, err := tab.valueExpr()
	if err != nil {
		return "", err
	}
	return memBody(&debuginfo.Expr{Kind: base.Kind, Reg: base.Reg, Mem: base.Mem, Addr: base.Addr, Offset: base.Offset + 8}, sym)
}

// structFields expands a Go struct by value into its fields, NAME_FIELD.
func structFields(name string, p place, st *dwarf.StructType, cx *fetchCtx) ([]field, error) {
	var out []field
	for _, f := range st.Field {
		sp, err := p.sub(f.ByteOffset, f.Type)
		if err != nil {
			return nil, fmt.Errorf(".%s: %w", f.Name, err)
		}
		fs, err := fields(name+"_"+sanitize(f.Name), sp, "", cx)
		if err != nil {
			return nil, fmt.Errorf(".%s: %w", f.Name, err)
		}
		out = append(out, fs...)
		if len(out) > maxStructFields {
			return nil, fmt.Errorf("a struct of more than %d fields: name a member (VAR.FIELD)", maxStructFields)
		}
	}
	return out, nil
}

// Go's ABIInternal result registers on amd64, as DWARF numbers them: RAX, RBX,
// RCX, RDI, RSI, R8, R9, R10, R11, and X0-X14.
var (
	goIntRegs   = []uint64{0, 3, 2, 5, 4, 8, 9, 10, 11}
	goFloatRegs = func() []uint64 {
		var r []uint64
		for i := uint64(0); i < 15; i++ {
			r = append(r, 17+i)
		}
		return r
	}()
)

// abiAssign assigns registers to values as Go's ABIInternal does (each value whole
// in registers, else on the stack, and the next value tries again).
type abiAssign struct{ ints, floats int }

// place returns where a value of type t is in registers, or an error when the ABI
// puts it on the stack.
func (a *abiAssign) place(t dwarf.Type) (place, error) {
	save := *a
	var parts []part
	if !a.add(t, 0, &parts, 0) {
		*a = save
		return place{}, fmt.Errorf("%w: it is returned on the stack (more results than Go's result registers hold)", debuginfo.ErrUnavailable)
	}
	if len(parts) == 1 && parts[0].off == 0 {
		return place{typ: t, reg: parts[0].loc.Reg}, nil
	}
	return place{typ: t, parts: parts}, nil
}

func (a *abiAssign) add(t dwarf.Type, off int64, parts *[]part, depth int) bool {
	if depth > 8 {
		return false
	}
	reg := func(regs []uint64, n *int, size int64) bool {
		if *n >= len(regs) {
			return false
		}
		r := regs[*n]
		*n++
		*parts = append(*parts, part{off: off, size: size, loc: debuginfo.Loc{Reg: &r}})
		return true
	}
	switch x := strip(t).(type) {
	case *dwarf.FloatType:
		return reg(goFloatRegs, &a.floats, x.ByteSize)
	case *dwarf.ComplexType:
		h := x.ByteSize / 2
		return a.add(&dwarf.FloatType{BasicType: dwarf.BasicType{CommonType: dwarf.CommonType{ByteSize: h}}}, off, parts, depth+1) &&
			a.add(&dwarf.FloatType{BasicType: dwarf.BasicType{CommonType: dwarf.CommonType{ByteSize: h}}}, off+h, parts, depth+1)
	case *dwarf.StructType:
		for _, f := range x.Field {
			if !a.add(f.Type, off+f.ByteOffset, parts, depth+1) {
				return false
			}
		}
		return true
	case *dwarf.ArrayType:
		switch x.Count {
		case 0:
			return true
		case 1:
			return a.add(x.Type, off, parts, depth+1)
		}
		return false
	case *dwarf.BoolType, *dwarf.IntType, *dwarf.UintType, *dwarf.CharType, *dwarf.UcharType, *dwarf.PtrType, *dwarf.FuncType:
		size := t.Size()
		if size <= 0 || size > 8 {
			return false
		}
		return reg(goIntRegs, &a.ints, size)
	}
	return false
}

// goResults are a Go function's results at its return, in the registers Go's ABI
// returns them in, named as DWARF names them (~rN for unnamed ones).
func goResults(in *debuginfo.Info, f *debuginfo.Func) ([]debuginfo.Var, []place, error) {
	_, vars, err := in.VarsIn(f.Entry, f)
	if err != nil {
		return nil, nil, err
	}
	var rs []debuginfo.Var
	var ps []place
	var abi abiAssign
	for _, v := range vars {
		if !v.Result {
			continue
		}
		if v.Type == nil {
			return nil, nil, fmt.Errorf("result %s has no type", v.Name)
		}
		p, err := abi.place(v.Type)
		v.Err = err
		rs, ps = append(rs, v), append(ps, p)
	}
	return rs, ps, nil
}

// deref is the value a pointer at p points to.
func (p place) deref() (place, error) {
	pt, ok := strip(p.typ).(*dwarf.PtrType)
	if !ok {
		return place{}, fmt.Errorf("not a pointer (%s)", typeName(p.typ))
	}
	base, err := p.valueExpr()
	if err != nil {
		return place{}, err
	}
	return place{typ: pt.Type, addr: base}, nil
}

// varPlace is where $params and $vars read v, and its field name: Go's names that
// are no identifiers are made ones (&x, a variable moved to the heap whose address
// DWARF gives, is x read through it; ~r0 is r0; .param3, an unnamed parameter, is
// param3).
func varPlace(v debuginfo.Var, p place) (place, string, error) {
	name := v.Name
	if n, ok := strings.CutPrefix(name, "&"); ok {
		q, err := p.deref()
		if err != nil {
			return place{}, "", err
		}
		p, name = q, n
	}
	return p, sanitize(strings.TrimLeft(name, "~.")), nil
}

// resultName is a result's field name: ~rN (unnamed) is rN.
func resultName(n string) string { return strings.TrimPrefix(n, "~") }

// errNoResults says a Go function has no result for $retval.
var errNoResults = errors.New("returns nothing")
