package srcprobe

import (
	"debug/dwarf"
	"fmt"
	"strconv"

	"github.com/kprewrite/kprewrite/internal/debuginfo"
)

// place is where a value is at the probe: in a register, computed, or in memory.
type place struct {
	typ   dwarf.Type
	reg   *uint64
	value *debuginfo.Expr
	addr  *debuginfo.Expr
	piece int    // bytes the location covers, 0 for all
	parts []part // a value split in pieces: where each is
}

func placeOf(v debuginfo.Var) place {
	if v.Loc.Pieces != nil {
		return place{typ: v.Type, parts: partsOf(v.Loc.Pieces, v.Type)}
	}
	return place{typ: v.Type, reg: v.Loc.Reg, value: v.Loc.Value, addr: v.Loc.Addr, piece: v.Loc.Piece}
}

// valueExpr is the place's value as an expression (for following a pointer).
func (p place) valueExpr() (*debuginfo.Expr, error) {
	if p.parts != nil {
		w, err := p.word(0)
		if err != nil {
			return nil, err
		}
		return w.valueExpr()
	}
	switch {
	case p.reg != nil:
		return &debuginfo.Expr{Kind: debuginfo.ExprReg, Reg: *p.reg}, nil
	case p.value != nil:
		if p.value.Kind == debuginfo.ExprConst {
			return nil, fmt.Errorf("it is the constant %d, not a pointer into memory", p.value.Offset)
		}
		e := *p.value
		return &e, nil
	}
	return &debuginfo.Expr{Kind: debuginfo.ExprMem, Mem: p.addr}, nil
}

// step applies one access of a chain.
func (p place) step(a access) (place, error) {
	t := strip(p.typ)
	switch a.kind {
	case '>':
		pt, ok := t.(*dwarf.PtrType)
		if !ok {
			return place{}, fmt.Errorf("->%s: not a pointer (%s)", a.field, typeName(p.typ))
		}
		base, err := p.valueExpr()
		if err != nil {
			return place{}, fmt.Errorf("->%s: %w", a.field, err)
		}
		return member(place{typ: pt.Type, addr: base}, a.field, "->")
	case '.':
		if _, ok := t.(*dwarf.PtrType); ok { // Go's p.F through a pointer
			return p.step(access{kind: '>', field: a.field})
		}
		if p.addr == nil && p.parts == nil {
			return place{}, fmt.Errorf(".%s: the aggregate is not in memory here", a.field)
		}
		return member(p, a.field, ".")
	case '[':
		switch x := t.(type) {
		case *dwarf.ArrayType:
			if p.addr == nil {
				return place{}, fmt.Errorf("[%d]: the array is not in memory here", a.index)
			}
			if x.Count >= 0 && (a.index < 0 || a.index >= x.Count) {
				return place{}, fmt.Errorf("[%d]: out of bounds of %s", a.index, x)
			}
			return offsetBy(place{typ: x.Type, addr: p.addr}, a.index*x.Type.Size()), nil
		case *dwarf.PtrType:
			base, err := p.valueExpr()
			if err != nil {
				return place{}, fmt.Errorf("[%d]: %w", a.index, err)
			}
			size := x.Type.Size()
			if size <= 0 {
				return place{}, fmt.Errorf("[%d]: the pointed-to type has no size", a.index)
			}
			return offsetBy(place{typ: x.Type, addr: base}, a.index*size), nil
		}
		if kindOf(p.typ) == goSlice { // a Go slice: its array's element
			arr := t.(*dwarf.StructType).Field[0]
			w, err := p.sub(0, arr.Type)
			if err != nil {
				return place{}, fmt.Errorf("[%d]: %w", a.index, err)
			}
			return w.step(a)
		}
		return place{}, fmt.Errorf("[%d]: not an array or a pointer (%s)", a.index, typeName(p.typ))
	}
	return place{}, fmt.Errorf("bad access")
}

func offsetBy(p place, off int64) place {
	e := *p.addr
	e.Offset += off
	p.addr = &e
	return p
}

// member finds field name in the struct or union at p (in memory).
func member(p place, name, how string) (place, error) {
	st, ok := strip(p.typ).(*dwarf.StructType)
	if !ok {
		return place{}, fmt.Errorf("%s%s: not a struct or union (%s)", how, name, typeName(p.typ))
	}
	if st.Incomplete {
		return place{}, fmt.Errorf("%s%s: %s is only declared here", how, name, st)
	}
	for _, f := range st.Field {
		if f.Name == name {
			if f.BitSize > 0 {
				return bitfield(p, f)
			}
			np, err := p.sub(f.ByteOffset, f.Type)
			if err != nil {
				return place{}, fmt.Errorf("%s%s: %w", how, name, err)
			}
			return np, nil
		}
		if f.Name == "" && p.addr != nil { // an anonymous struct or union member: look inside
			if inner, err := member(offsetBy(place{typ: f.Type, addr: p.addr}, f.ByteOffset), name, how); err == nil {
				return inner, nil
			}
		}
	}
	return place{}, fmt.Errorf("%s%s: %s has no member %s", how, name, st, name)
}

// bitfieldType marks a place read as a bitfield: the kernel type is in its name.
type bitfieldType struct {
	dwarf.CommonType
	kernel string
}

func (b *bitfieldType) String() string { return b.kernel }
func (b *bitfieldType) Size() int64    { return b.ByteSize }

// bitfield reads member f as the kernel's b<width>@<offset>/<container>, or
// kprewrite's sb<width>@<offset>/<container> for a signed one; an enum's gets its
// table.
func bitfield(p place, f *dwarf.StructField) (place, error) {
	prefix, table := "b", ""
	switch x := strip(f.Type).(type) {
	case *dwarf.IntType, *dwarf.CharType:
		prefix = "sb"
	case *dwarf.EnumType:
		if enumPrefix(x) == "s" {
			prefix = "sb"
		}
		table = enumTable(x)
	}
	size := f.Type.Size()
	if size != 1 && size != 2 && size != 4 && size != 8 {
		return place{}, fmt.Errorf("bitfield %s of %d bytes", f.Name, size)
	}
	bits := size * 8
	bitOff := f.DataBitOffset
	if bitOff == 0 && f.BitOffset != 0 { // DWARF 2/3: counted from the container's high bit
		bitOff = f.ByteOffset*8 + bits - f.BitOffset - f.BitSize
	} else if f.DataBitOffset == 0 && f.ByteOffset != 0 {
		bitOff = f.ByteOffset * 8
	}
	start := bitOff / bits * size
	shift := bitOff - start*8
	if shift+f.BitSize > bits {
		return place{}, fmt.Errorf("bitfield %s straddles two %d-byte words", f.Name, size)
	}
	np := offsetBy(place{addr: p.addr}, start)
	np.typ = &bitfieldType{CommonType: dwarf.CommonType{ByteSize: size},
		kernel: prefix + strconv.FormatInt(f.BitSize, 10) + "@" + strconv.FormatInt(shift, 10) + "/" + strconv.FormatInt(bits, 10) + table}
	return np, nil
}

// fetch renders the place as a fetcharg body and kernel type; userType, when not
// "", is the type the user gave.
func (p place) fetch(userType string, sym symbolizer) (body, typ string, err error) {
	if p.parts != nil {
		if p.typ == nil {
			return "", "", fmt.Errorf("its type is unknown")
		}
		whole, err := p.sub(0, p.typ)
		if err != nil {
			return "", "", fmt.Errorf("split in pieces: %w", err)
		}
		if whole.parts != nil {
			return "", "", fmt.Errorf("it is in %d pieces here (name a member: VAR.FIELD)", len(whole.parts))
		}
		return whole.fetch(userType, sym)
	}
	t := strip(p.typ)
	if b, ok := p.typ.(*bitfieldType); ok {
		body, err := memBody(p.addr, sym)
		return body, pick(userType, b.kernel), err
	}
	if p.piece > 0 && p.typ != nil && int64(p.piece) < p.typ.Size() {
		return "", "", fmt.Errorf("only %d of its %d bytes are in one place here", p.piece, p.typ.Size())
	}
	isString := userType == "string" || userType == "ustring"
	switch {
	case isString && p.addr != nil && isArrayOfChar(t), userType == "" && p.addr != nil && isArrayOfChar(t):
		body, err := memBody(p.addr, sym) // the characters are at the address itself
		return body, pick(userType, "string"), err
	case isString || userType == "" && isCharPtr(p.typ):
		v, err := p.valueExpr()
		if err != nil {
			return "", "", err
		}
		body, err := memBody(v, sym)
		return body, pick(userType, "string"), err
	}
	kt := userType
	if kt == "" {
		if at, ok := t.(*dwarf.ArrayType); ok {
			if p.addr == nil {
				return "", "", fmt.Errorf("the array is not in memory here")
			}
			et, err := scalarType(at.Type)
			if err != nil {
				return "", "", fmt.Errorf("its elements: %w", err)
			}
			n := at.Count
			if n <= 0 || n > maxArrayLen {
				return "", "", fmt.Errorf("an array of %d elements; the kernel fetches at most %d (index it: VAR[N])", n, maxArrayLen)
			}
			body, err := memBody(p.addr, sym)
			return body, withCount(et, n), err
		}
		if kt, err = scalarType(p.typ); err != nil {
			return "", "", err
		}
	}
	switch {
	case p.reg != nil:
		return "%" + debuginfo.RegName(*p.reg), kt, nil
	case p.value != nil:
		body, err := valueBody(p.value, sym)
		return body, kt, err
	}
	body, err = memBody(p.addr, sym)
	return body, kt, err
}

func pick(user, def string) string {
	if user != "" {
		return user
	}
	return def
}

func isArrayOfChar(t dwarf.Type) bool {
	a, ok := t.(*dwarf.ArrayType)
	return ok && isChar(a.Type)
}

// symbolizer names a link-time data address as SYM+OFF for @SYM fetchargs.
type symbolizer func(addr uint64) (string, bool)

// valueBody renders a computed value.
func valueBody(e *debuginfo.Expr, sym symbolizer) (string, error) {
	switch e.Kind {
	case debuginfo.ExprReg:
		if e.Offset != 0 {
			return "", fmt.Errorf("its value is %s%+d, which a fetch cannot add", debuginfo.RegName(e.Reg), e.Offset)
		}
		return "%" + debuginfo.RegName(e.Reg), nil
	case debuginfo.ExprMem:
		if e.Offset != 0 {
			return "", fmt.Errorf("its value is a memory word %+d, which a fetch cannot add", e.Offset)
		}
		return memBody(e.Mem, sym)
	case debuginfo.ExprConst:
		return `\` + strconv.FormatInt(e.Offset, 10), nil
	}
	return "", fmt.Errorf("its value is an address, which a fetch cannot produce")
}

// memBody renders a read of memory at address e.
func memBody(e *debuginfo.Expr, sym symbolizer) (string, error) {
	off := strconv.FormatInt(e.Offset, 10)
	if e.Offset >= 0 {
		off = "+" + off
	}
	switch e.Kind {
	case debuginfo.ExprReg:
		return off + "(%" + debuginfo.RegName(e.Reg) + ")", nil
	case debuginfo.ExprMem:
		inner, err := memBody(e.Mem, sym)
		if err != nil {
			return "", err
		}
		return off + "(" + inner + ")", nil
	case debuginfo.ExprAddr:
		s, ok := sym(uint64(int64(e.Addr) + e.Offset))
		if !ok {
			return "", fmt.Errorf("it is at %#x, which no data symbol holds", uint64(int64(e.Addr)+e.Offset))
		}
		return "@" + s, nil
	}
	return "", fmt.Errorf("it is at a constant address")
}
