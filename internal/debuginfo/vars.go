package debuginfo

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
)

// Var is a variable or parameter visible at an address.
type Var struct {
	Name   string
	Type   dwarf.Type // nil when the debug information gives none
	Param  bool
	Global bool
	// Result: a Go function's result (a formal parameter with
	// DW_AT_variable_parameter, named ~rN when the source names none)
	Result bool
	Loc    Loc   // where it is there, when Err is nil
	Err    error // why it cannot be read there (wraps ErrUnavailable)
}

// Vars returns the variables visible at pc, as a debugger shows them in the
// innermost frame there (the inlined copy pc is in, if any): the parameters, then
// the locals of every scope holding pc (an inner one hides an outer one of the same
// name), then the global variables of its unit and the external ones of the others.
func (in *Info) Vars(pc uint64) (*Func, []Var, error) {
	return in.VarsIn(pc, nil)
}

// VarsIn returns the variables visible at pc in the frame of f, a function copy
// holding pc (nil: the innermost): a line of FUNC is read in FUNC's frame even
// where an inlined callee's code is at that address.
func (in *Info) VarsIn(pc uint64, f *Func) (*Func, []Var, error) {
	if f == nil {
		f = in.FuncAt(pc)
	}
	if f == nil || !f.Contains(pc) {
		return nil, nil, fmt.Errorf("no function with debug information holds %#x", pc)
	}
	concrete := f
	if f.Inlined && f.outer != nil {
		concrete = f.outer
	}
	ctx := &exprCtx{in: in, pc: pc, atEntry: pc == concrete.Entry}
	var fb *Expr
	var fbErr error
	fbDone := false
	ctx.frame = func() (*Expr, error) {
		if !fbDone {
			fbDone = true
			fb, fbErr = in.frameBase(concrete, ctx)
		}
		return fb, fbErr
	}
	var found []scoped
	r := in.d.Reader()
	r.Seek(f.off)
	top, err := r.Next()
	if err != nil || top == nil {
		return f, nil, fmt.Errorf("read the DIE of %s: %v", f.Name, err)
	}
	if top.Children {
		if err := in.scopeVars(r, pc, 1, &found); err != nil {
			return f, nil, err
		}
	}
	byName := map[string]int{}
	var vars []Var
	var depths []int // of vars: an inner scope's variable hides an outer one's
	add := func(e *dwarf.Entry, u *unit, depth int, global bool) {
		v := in.readVar(e, u, ctx)
		v.Global = global
		if v.Name == "" {
			return
		}
		if i, ok := byName[v.Name]; ok {
			if depths[i] < depth {
				vars[i], depths[i] = v, depth
			}
			return
		}
		byName[v.Name] = len(vars)
		vars, depths = append(vars, v), append(depths, depth)
	}
	// parameters first, then locals, as gdb's info args and info locals
	for _, params := range []bool{true, false} {
		for _, s := range found {
			if (s.e.Tag == dwarf.TagFormalParameter) == params {
				add(s.e, f.u, s.depth, false)
			}
		}
	}
	for _, u := range in.units {
		for _, e := range u.globals {
			if u != f.u {
				if ext, _ := e.Val(dwarf.AttrExternal).(bool); !ext {
					continue
				}
			}
			if _, ok := e.Val(dwarf.AttrLocation).([]byte); !ok {
				continue // a declaration; its definition (with DW_AT_specification) has the location
			}
			add(e, u, 0, true)
		}
	}
	return f, vars, nil
}

type scoped struct {
	e     *dwarf.Entry
	depth int
}

// scopeVars collects the variables of the scopes under the current DIE that hold
// pc; inlined copies and nested functions are other frames and are skipped.
func (in *Info) scopeVars(r *dwarf.Reader, pc uint64, depth int, out *[]scoped) error {
	for {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("read .debug_info: %w", err)
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		switch e.Tag {
		case dwarf.TagFormalParameter, dwarf.TagVariable:
			*out = append(*out, scoped{e, depth})
		case dwarf.TagLexDwarfBlock:
			ranges, err := in.d.Ranges(e)
			holds := err == nil && len(ranges) == 0 // a block without code bounds is its parent's
			for _, rg := range ranges {
				if pc >= rg[0] && pc < rg[1] {
					holds = true
				}
			}
			if holds && e.Children {
				if err := in.scopeVars(r, pc, depth+1, out); err != nil {
					return err
				}
				continue
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
}

// readVar reads a variable's name, type and location at ctx.pc.
func (in *Info) readVar(e *dwarf.Entry, u *unit, ctx *exprCtx) Var {
	v := Var{Param: e.Tag == dwarf.TagFormalParameter}
	if vp, _ := e.Val(dwarf.AttrVarParam).(bool); vp && v.Param && u.golang {
		v.Result = true
	}
	decl := e
	for i := 0; i < 4 && (v.Name == "" || v.Type == nil); i++ {
		if n, ok := decl.Val(dwarf.AttrName).(string); ok && v.Name == "" {
			v.Name = n
		}
		if t, ok := decl.Val(dwarf.AttrType).(dwarf.Offset); ok && v.Type == nil {
			if ty, err := in.d.Type(t); err == nil {
				v.Type = ty
			}
		}
		ref, ok := decl.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			if ref, ok = decl.Val(dwarf.AttrSpecification).(dwarf.Offset); !ok {
				break
			}
		}
		if decl = in.entryAt(ref); decl == nil {
			break
		}
	}
	v.Loc, v.Err = in.varLoc(e, u, ctx)
	return v
}

// varLoc is the location of the variable e at ctx.pc.
func (in *Info) varLoc(e *dwarf.Entry, u *unit, ctx *exprCtx) (Loc, error) {
	f := e.AttrField(dwarf.AttrLocation)
	if f == nil {
		if cv := e.AttrField(dwarf.AttrConstValue); cv != nil {
			switch x := cv.Val.(type) {
			case int64:
				return Loc{Value: &Expr{Kind: ExprConst, Offset: x}}, nil
			case uint64:
				return Loc{Value: &Expr{Kind: ExprConst, Offset: int64(x)}}, nil
			}
			return Loc{}, unavailable("a constant of more than 8 bytes")
		}
		return Loc{}, unavailable("optimized out (no location)")
	}
	expr, err := in.locExpr(f, u, ctx.pc)
	if err != nil {
		return Loc{}, err
	}
	return ctx.eval(expr)
}

// locExpr is the location expression of attribute f in force at pc.
func (in *Info) locExpr(f *dwarf.Field, u *unit, pc uint64) ([]byte, error) {
	switch f.Class {
	case dwarf.ClassExprLoc, dwarf.ClassBlock:
		b, _ := f.Val.([]byte)
		return b, nil
	case dwarf.ClassLocListPtr:
		off, _ := f.Val.(int64)
		if u.version >= 5 {
			return in.loclist5(u, uint64(off), pc)
		}
		return in.loclist4(u, uint64(off), pc)
	case dwarf.ClassLocList:
		idx, _ := f.Val.(uint64)
		ll := in.sec["loclists"]
		at := u.loclistsBase + 4*idx
		if at+4 > uint64(len(ll)) {
			return nil, fmt.Errorf("location list index %d is past .debug_loclists", idx)
		}
		return in.loclist5(u, u.loclistsBase+uint64(binary.LittleEndian.Uint32(ll[at:])), pc)
	}
	return nil, unavailable("a location of class %v", f.Class)
}

// loclist4 finds pc in the DWARF 4 location list at off in .debug_loc.
func (in *Info) loclist4(u *unit, off, pc uint64) ([]byte, error) {
	b := in.sec["loc"]
	base := u.base
	for {
		if off+16 > uint64(len(b)) {
			return nil, fmt.Errorf("location list at %#x runs past .debug_loc", off)
		}
		lo, hi := binary.LittleEndian.Uint64(b[off:]), binary.LittleEndian.Uint64(b[off+8:])
		off += 16
		switch {
		case lo == 0 && hi == 0:
			return nil, unavailable("not live at %#x (no location list entry covers it)", pc)
		case lo == ^uint64(0):
			base = hi
			continue
		}
		if off+2 > uint64(len(b)) {
			return nil, fmt.Errorf("location list at %#x runs past .debug_loc", off)
		}
		n := uint64(binary.LittleEndian.Uint16(b[off:]))
		off += 2
		if off+n > uint64(len(b)) {
			return nil, fmt.Errorf("location list at %#x runs past .debug_loc", off)
		}
		if pc >= base+lo && pc < base+hi {
			return b[off : off+n], nil
		}
		off += n
	}
}

// DWARF 5 location list entry kinds.
const (
	lleEndOfList      = 0x00
	lleBaseAddressx   = 0x01
	lleStartxEndx     = 0x02
	lleStartxLength   = 0x03
	lleOffsetPair     = 0x04
	lleDefaultLoc     = 0x05
	lleBaseAddress    = 0x06
	lleStartEnd       = 0x07
	lleStartLength    = 0x08
	lleGNUViewPair    = 0x09
	maxLocListEntries = 1 << 16
)

// loclist5 finds pc in the DWARF 5 location list at off in .debug_loclists.
func (in *Info) loclist5(u *unit, off, pc uint64) ([]byte, error) {
	b := in.sec["loclists"]
	if off >= uint64(len(b)) {
		return nil, fmt.Errorf("location list at %#x is past .debug_loclists", off)
	}
	r := exprReader{b: b, pos: int(off)}
	base := u.base
	var deflt []byte
	for i := 0; i < maxLocListEntries; i++ {
		kind := r.u8()
		var lo, hi uint64
		hasRange := true
		switch kind {
		case lleEndOfList:
			if r.err != nil {
				return nil, r.err
			}
			if deflt != nil {
				return deflt, nil
			}
			return nil, unavailable("not live at %#x (no location list entry covers it)", pc)
		case lleBaseAddressx:
			base = in.debugAddr(u, r.uleb())
			hasRange = false
		case lleBaseAddress:
			base = r.u64()
			hasRange = false
		case lleGNUViewPair:
			r.uleb()
			r.uleb()
			hasRange = false
		case lleStartxEndx:
			lo, hi = in.debugAddr(u, r.uleb()), in.debugAddr(u, r.uleb())
		case lleStartxLength:
			lo = in.debugAddr(u, r.uleb())
			hi = lo + r.uleb()
		case lleOffsetPair:
			lo, hi = base+r.uleb(), base+r.uleb()
		case lleStartEnd:
			lo, hi = r.u64(), r.u64()
		case lleStartLength:
			lo = r.u64()
			hi = lo + r.uleb()
		case lleDefaultLoc:
			lo, hi = 0, 0
		default:
			return nil, fmt.Errorf("location list entry kind %#x at %#x of .debug_loclists", kind, r.pos-1)
		}
		if !hasRange {
			continue
		}
		n := r.uleb()
		if r.err != nil || n > uint64(len(b)-r.pos) {
			return nil, fmt.Errorf("location list at %#x runs past .debug_loclists", off)
		}
		expr := b[r.pos : r.pos+int(n)]
		r.pos += int(n)
		if kind == lleDefaultLoc {
			deflt = expr
			continue
		}
		if pc >= lo && pc < hi {
			return expr, nil
		}
	}
	return nil, fmt.Errorf("location list at %#x has too many entries", off)
}

// debugAddr is entry idx of u's .debug_addr table (0 if it has none).
func (in *Info) debugAddr(u *unit, idx uint64) uint64 {
	b := in.sec["addr"]
	at := u.addrBase + 8*idx
	if at+8 > uint64(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[at:])
}

// frameBase is the frame base of the concrete function f at ctx.pc, as the value
// DW_OP_fbreg offsets are added to.
func (in *Info) frameBase(f *Func, ctx *exprCtx) (*Expr, error) {
	e := in.entryAt(f.off)
	if e == nil {
		return nil, fmt.Errorf("read the DIE of %s", f.Name)
	}
	fa := e.AttrField(dwarf.AttrFrameBase)
	if fa == nil {
		return nil, unavailable("%s has no frame base", f.Name)
	}
	expr, err := in.locExpr(fa, f.u, ctx.pc)
	if err != nil {
		return nil, err
	}
	sub := *ctx
	sub.frame = func() (*Expr, error) { return nil, fmt.Errorf("a frame base defined by itself") }
	loc, err := sub.eval(expr)
	switch {
	case err != nil:
		return nil, fmt.Errorf("frame base of %s: %w", f.Name, err)
	case loc.Reg != nil && *loc.Reg <= maxReg: // DW_OP_regN: the register holds the frame base
		return &Expr{Kind: ExprReg, Reg: *loc.Reg}, nil
	case loc.Addr != nil: // DW_OP_call_frame_cfa, DW_OP_bregN: an address
		return loc.Addr, nil
	}
	return nil, unavailable("frame base of %s is a computed value", f.Name)
}
