package eventdef

import (
	"strconv"
	"strings"
)

// TypeKind says how a fetched value is stored in a trace record and printed.
type TypeKind uint8

// Type kinds.
const (
	KindUnsigned TypeKind = iota + 1 // u8..u64 and bitfields: decimal
	KindSigned                       // s8..s64: signed decimal
	KindHex                          // x8..x64 and the default type: 0x%x
	KindChar                         // char: '%c'
	KindString                       // string: "..." or (fault)
	KindUString                      // ustring: as string
	KindSymbol                       // symbol: sym+0xoff/0xsize (kprewrite extension for user space)
	KindSymstr                       // symstr: "sym+0xoff/0xsize" (kprewrite extension for user space)
	KindFloat                        // f32, f64: the shortest decimal that reads back (kprewrite extension)
	KindGoErr                        // goerr: a Go error's message, else its dynamic type (kprewrite extension)
)

// fetchType is one entry of the kernel's probe_fetch_types table.
type fetchType struct {
	name     string
	kind     TypeKind
	size     int  // bytes per element in the record
	isString bool // the kernel's is_string (string, ustring, symstr)
}

var fetchTypes = []fetchType{
	{"string", KindString, 4, true},
	{"ustring", KindUString, 4, true},
	// gostring (kprewrite): a Go string, {pointer, length}, printed as a string of
	// its length (no NUL ends it): +OFF(...):gostring reads the two words at the
	// address, PTR,LEN:gostring takes them from two fetches
	{"gostring", KindString, 4, true},
	// goerr (kprewrite): a Go error's message where its dynamic type keeps it in
	// memory, else the type's name (goerr.go)
	{"goerr", KindGoErr, 4, true},
	{"symstr", KindSymstr, 8, true},
	{"u8", KindUnsigned, 1, false},
	{"u16", KindUnsigned, 2, false},
	{"u32", KindUnsigned, 4, false},
	{"u64", KindUnsigned, 8, false},
	{"s8", KindSigned, 1, false},
	{"s16", KindSigned, 2, false},
	{"s32", KindSigned, 4, false},
	{"s64", KindSigned, 8, false},
	{"x8", KindHex, 1, false},
	{"x16", KindHex, 2, false},
	{"x32", KindHex, 4, false},
	{"x64", KindHex, 8, false},
	{"char", KindChar, 1, false},
	{"symbol", KindSymbol, 8, false},
	{"f32", KindFloat, 4, false},
	{"f64", KindFloat, 8, false},
}

// defaultType is the type of an argument without :TYPE on x86-64.
const defaultType = "x64"

// findFetchType is the kernel's find_fetch_type(): bitfields resolve to
// their container's unsigned type, and signed bitfields (sb<w>@<o>/<c>, a
// kprewrite extension) to its signed one. Unlike uprobes (which reject them),
// symbol and symstr are accepted, as kprobes do.
func findFetchType(name string) *fetchType {
	if strings.HasPrefix(name, "b") || strings.HasPrefix(name, "sb") {
		i := strings.IndexByte(name, '/')
		if i < 0 {
			return nil
		}
		bs, ok := kstrtoul(name[i+1:], 0)
		if !ok {
			return nil
		}
		prefix := "u"
		if name[0] == 's' {
			prefix = "s"
		}
		switch bs {
		case 8, 16, 32, 64:
			return findFetchType(prefix + strconv.FormatUint(bs, 10))
		}
		return nil
	}
	for i := range fetchTypes {
		if fetchTypes[i].name == name {
			return &fetchTypes[i]
		}
	}
	return nil
}

// x86-64 struct pt_regs, in memory order. These are exactly the names the
// kernel accepts in %REG on x86-64 (its regoffset_table); ds, es, fs and gs
// exist only on 32-bit x86 and are refused (checked against the oracle).
var ptRegs = [...]string{
	"r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8",
	"ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss",
}

// PtRegsSize is sizeof(struct pt_regs) on x86-64.
const PtRegsSize = len(ptRegs) * 8

// RegOffset returns the byte offset in struct pt_regs of a register named
// as in %REG ("ax", "r8", "flags", ...), as regs_query_register_offset does.
func RegOffset(name string) (int, bool) {
	for i, n := range ptRegs {
		if n == name {
			return i * 8, true
		}
	}
	return 0, false
}

// xmmReg parses a kprewrite extension of %REG: xmm0..xmm15, the SSE registers
// (their low 64 bits), where compilers keep float and double variables.
func xmmReg(name string) (uint32, bool) {
	n, ok := strings.CutPrefix(name, "xmm")
	if !ok || n == "" || len(n) > 2 || n[0] == '0' && len(n) > 1 {
		return 0, false
	}
	v, err := strconv.Atoi(n)
	if err != nil || v > 15 {
		return 0, false
	}
	return uint32(v), true
}

// Register offsets the package itself needs.
var (
	offAX, _ = RegOffset("ax")
	offSP, _ = RegOffset("sp")
	// argRegs are the System V x86-64 integer argument registers, as the
	// kernel's regs_get_kernel_argument() uses them for $argN.
	argRegs = [6]string{"di", "si", "dx", "cx", "r8", "r9"}
)
