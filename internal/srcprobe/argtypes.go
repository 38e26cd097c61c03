package srcprobe

import (
	"debug/dwarf"
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/internal/debuginfo"
	"github.com/kprewrite/kprewrite/internal/eventdef"
)

// argRegisters are the registers of the x86-64 SysV ABI's integer and pointer
// parameters, in order, as fetchargs name them.
var argRegisters = map[string]int{"%di": 0, "%si": 1, "%dx": 2, "%cx": 3, "%r8": 4, "%r9": 5,
	"$arg1": 0, "$arg2": 1, "$arg3": 2, "$arg4": 3, "$arg5": 4, "$arg6": 5}

// typedArgs returns def, a kernel-form entry probe (SYM, SYM+0, 0xADDR or their LIB:
// forms at a function's entry), with a type added to each untyped fetcharg that is an
// argument register (%di, %si, %dx, %cx, %r8, %r9, or $argN) holding a parameter of a
// base type there: the parameter's type from DWARF, as source-level probes type a
// variable (int: s32, unsigned long: u64, bool: u8, an enum: its integer type and
// names). A pointer stays the kernel's default x64. "" when nothing is typed: KernelTypes
// is set, the binary carries no DWARF of its own (a separate debug file is not looked
// for, as for typedRetval: a kernel-form definition means the same on every machine),
// the site is no C function's entry, or no argument is such a register.
func (r *Resolver) typedArgs(def string) (string, error) {
	w := strings.Fields(def)
	if r.KernelTypes || len(w) < 3 || !strings.HasPrefix(w[0], "p") || strings.HasSuffix(w[1], "%return") {
		return "", nil
	}
	if _, err := eventdef.Parse(def); err != nil {
		return "", nil // refused as written: the error and its caret are the kernel's
	}
	typed := r.dwarfTypes(w)
	return r.sameAsEvent(w, typed)
}

// dwarfTypes types w's untyped argument registers (typedArgs) in place; it says
// whether it typed any.
func (r *Resolver) dwarfTypes(w []string) bool {
	fn, res := r.entryFunc(w[1])
	if fn == nil {
		return false
	}
	in, err := res.Info()
	if err != nil {
		return false
	}
	params := cParams(in, fn)
	typed := false
	for i, a := range w[2:] {
		pa := parseArg(a, i+1)
		k, ok := argRegisters[pa.body]
		if !ok || pa.typ != "" || pa.badName {
			continue
		}
		if t := paramType(params, k); t != "" {
			w[2+i] += ":" + t
			typed = true
		}
	}
	return typed
}

// sameAsEvent keeps a multi-probe event's arguments alike, as the kernel requires of
// its probes: a named event's later probe takes types from DWARF only as its first
// probe did (none when the first took none), and types that disagree are an error
// that says how to settle them. It returns the definition (w, typed or not), "" when
// it is def unchanged.
func (r *Resolver) sameAsEvent(w []string, typed bool) (string, error) {
	head := w[0]
	if !strings.Contains(head, ":") { // an event named after its site: one probe
		if typed {
			return strings.Join(w, " "), nil
		}
		return "", nil
	}
	args := strings.Join(w[2:], " ")
	if r.eventArgs == nil {
		r.eventArgs = map[string]eventTypes{}
	}
	first, seen := r.eventArgs[head]
	if !seen {
		r.eventArgs[head] = eventTypes{site: w[1], args: args, typed: typed}
		if typed {
			return strings.Join(w, " "), nil
		}
		return "", nil
	}
	switch {
	case !first.typed:
		return "", nil
	case args == first.args:
		return strings.Join(w, " "), nil
	}
	return "", fmt.Errorf("%s %s: its arguments take the types %q from the DWARF of %s but %q here: give each argument a type (NAME=%%REG:TYPE) or rewrite with --kernel-types",
		head, w[1], first.args, first.site, args)
}

// eventTypes are the arguments of a named event's first probe, typed or not.
type eventTypes struct {
	site, args string
	typed      bool
}

// entryFunc is the C function whose entry the kernel-form site siteText is, and the
// resolver of the binary that holds it (a LIB:SITE's library); nil when it is none.
func (r *Resolver) entryFunc(siteText string) (*debuginfo.Func, *Resolver) {
	lib, siteText := splitLib(siteText)
	res := r
	if lib != "" {
		var err error
		if res, err = r.library(lib); err != nil {
			return nil, nil // the rewrite says why
		}
	}
	st := parseSite(siteText)
	if !st.raw || !res.ownDebugInfo() {
		return nil, nil
	}
	if lib != "" && isHex(st.text) {
		var err error
		if st.text, err = res.offsetSite(st.text); err != nil {
			return nil, nil
		}
	}
	in, err := res.Info()
	if err != nil {
		return nil, nil
	}
	// (as a return probe: the site as written, never moved past the prologue)
	pts, _, err := res.rawPoint(in, st, true)
	if err != nil || len(pts) != 1 || !pts[0].entry || pts[0].fn == nil || pts[0].fn.Go() {
		return nil, nil
	}
	if !isHex(st.text) && !res.symbolAt(st.text, pts[0].fn.Entry) {
		return nil, nil
	}
	return pts[0].fn, res
}

// symbolAt says whether the ELF symbol of the site SYM[+0] is the code at entry, the
// DWARF function's: DWARF names a function by its source name, and where gcc made a
// clone with another calling convention (work.isra.0) its parameters are not the
// symbol's registers.
func (r *Resolver) symbolAt(site string, entry uint64) bool {
	sym, _, _ := strings.Cut(site, "+")
	im, err := r.image()
	if err != nil {
		return false
	}
	f, ok := im.Functions().ByName(sym)
	return ok && f.Addr == entry
}

// cParams are the types of f's formal parameters, in order.
func cParams(in *debuginfo.Info, f *debuginfo.Func) []dwarf.Type {
	_, vars, err := in.VarsIn(f.Entry, f)
	if err != nil {
		return nil
	}
	var out []dwarf.Type
	for _, v := range vars {
		if v.Param && !v.Result && !v.Global {
			out = append(out, v.Type)
		}
	}
	return out
}

// paramType is the fetch type of the parameter in the k-th integer register (0: %di),
// "" when it is a pointer (the default x64 prints it), or cannot be told: the
// parameters before it are walked by the ABI's classes (an integer, enum or pointer
// takes the next register, a float or double an SSE register), and anything else
// before it (a struct passed by value, a long double, a 128-bit integer) ends the
// walk, as do variadic arguments past the named ones.
func paramType(params []dwarf.Type, k int) string {
	reg := 0
	for _, t := range params {
		switch x := strip(t).(type) {
		case *dwarf.FloatType:
			if x.ByteSize > 8 {
				return ""
			}
			continue // an SSE register
		case *dwarf.BoolType, *dwarf.CharType, *dwarf.UcharType, *dwarf.IntType, *dwarf.UintType, *dwarf.EnumType:
			if strip(t).Size() > 8 {
				return ""
			}
		case *dwarf.PtrType:
			if reg == k {
				return ""
			}
			reg++
			continue
		default:
			return ""
		}
		if reg == k {
			kt, err := scalarType(t)
			if err != nil {
				return ""
			}
			return kt
		}
		reg++
	}
	return ""
}
