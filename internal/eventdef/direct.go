package eventdef

// DirectLoc is where the value of a plain integer argument is at the probe point, for
// code that reads it there itself (a filter compiled into a detour): a general
// register, or bytes of the stack at the probe's %sp.
type DirectLoc struct {
	Reg   int // offset of the register in struct pt_regs; -1: the stack
	SPOff int // with Reg -1: the value is the Size bytes at %sp + SPOff
}

const (
	offOrig  = 15 * 8 // orig_ax and what follows it (ip, cs, flags, sp, ss) are no registers
	stackWin = 8      // the word at %sp: mapped wherever the probe point is
)

// Direct returns where argument i of p is when the value is a general register's low
// bytes ($argN at a function entry, %REG) or bytes of the word at %sp (+K(%sp), $stack0
// within it), of an integer type stored whole (no array, no bitfield). Anything else
// (memory that a read could fault on, strings, floats, computed values) is not direct.
func (p *Probe) Direct(i int) (DirectLoc, bool) {
	if i < 0 || i >= len(p.Args) {
		return DirectLoc{}, false
	}
	a := &p.Args[i]
	switch a.Kind {
	case KindUnsigned, KindSigned, KindHex, KindChar:
	default:
		return DirectLoc{}, false
	}
	if a.Count != 0 || a.Bitfield != nil || (a.Size != 1 && a.Size != 2 && a.Size != 4 && a.Size != 8) {
		return DirectLoc{}, false
	}
	c := a.code
	if len(c) != 3 || c[2].op != opEnd {
		return DirectLoc{}, false
	}
	reg := func(off int) (DirectLoc, bool) {
		if off < 0 || off >= offOrig || off%8 != 0 {
			return DirectLoc{}, false
		}
		return DirectLoc{Reg: off}, true
	}
	switch {
	case c[0].op == opReg && c[1].op == opStRaw:
		return reg(int(c[0].param))
	case c[0].op == opArg && c[1].op == opStRaw && p.FuncEntry() && int(c[0].param) < len(argRegs):
		off, _ := RegOffset(argRegs[c[0].param])
		return reg(off)
	case c[0].op == opReg && int(c[0].param) == offSP && c[1].op == opStMem:
		if k := int(c[1].offset); k >= 0 && k+a.Size <= stackWin {
			return DirectLoc{Reg: -1, SPOff: k}, true
		}
	case c[0].op == opStack && c[0].param == 0 && c[1].op == opStRaw:
		return DirectLoc{Reg: -1}, true
	}
	return DirectLoc{}, false
}
