package eventdef

import (
	"strconv"
	"strings"
)

// Limits, as in the kernel (kernel/trace/trace_probe.h, x86-64).
const (
	MaxArgs         = 128  // MAX_TRACE_ARGS
	MaxArgNameLen   = 32   // MAX_ARG_NAME_LEN
	MaxArgStrLen    = 63   // MAX_ARGSTR_LEN: longest fetch expression
	MaxArrayLen     = 64   // MAX_ARRAY_LEN
	MaxEventNameLen = 64   // MAX_EVENT_NAME_LEN, including the NUL
	MaxActive       = 4096 // KRETPROBE_MAXACTIVE_MAX
	MaxParamStack   = 2048 // PARAM_MAX_STACK: highest N in $argN and $stackN (THREAD_SIZE/8)
	fetchInsnMax    = 16   // FETCH_INSN_MAX: fetch instructions per argument
)

// DefaultGroup is the group of a probe whose definition names none; it is
// the kernel's default for uprobes.
const DefaultGroup = "uprobes"

// reservedNames are field names every probe event already has.
var reservedNames = []string{
	"common_type", "common_flags", "common_preempt_count", "common_pid",
	"common_tgid", "__probe_ip", "__probe_ret_ip", "__probe_func",
}

// Probe is one parsed probe event definition.
type Probe struct {
	Def string // the definition as given
	// Delete: "-:[GRP/][EVENT] [SITE [NAME=BODY...]]" removes the probes it matches (see
	// Set.Add); only Group, Event and Match are set, Group "" (none given) and Event ""
	// ("GRP/") matching any.
	Delete bool
	// Match is a deletion's words after its event: the probe point as the kernel writes
	// it back (SYM, SYM+OFFS in decimal, 0xADDR, LIB: before either) and the leading
	// arguments, NAME=BODY, of the probes it removes.
	Match     []string
	Return    bool   // a return probe ("r", or "%return")
	MaxActive int    // rN: instances tracked at once; 0 for the default
	Group     string // DefaultGroup when not given
	Event     string // generated when not given (see GeneratedEventName)
	// Lib is the shared object of a LIB:SITE probe point, as uprobe_events name one:
	// a path, or a soname the loader finds for the program. "" for the program's own
	// code.
	Lib    string
	Symbol string // the probed symbol; "" when the site is an address
	Offset uint64 // offset from Symbol
	// Addr is the probed address when Symbol is "": a virtual address, or with Lib a
	// file offset, as uprobe_events take it.
	Addr uint64
	Args []Arg
}

// Arg is one fetch argument, NAME=FETCHARG[:TYPE].
type Arg struct {
	Name     string    // as given, or argN (1-based) as the kernel names it
	Body     string    // the fetch expression as written, with its :TYPE
	Type     string    // element type as the kernel resolves it: "x64", "u32", "string"...; bitfields give their container ("u32")
	Kind     TypeKind  // how the element is stored and printed
	Size     int       // bytes per element in the trace record
	Count    int       // array length; 0 when not an array
	Bitfield *Bitfield // set for b<width>@<offset>/<container>
	// Enum names values of an integer type (TYPE{NAME=VALUE,...}, a kprewrite
	// extension that source-level probes write for C enums): a value with a name
	// prints as the name, others as TYPE prints them.
	Enum []EnumValue
	// GoErr are the recipes of a goerr argument's messages, by dynamic type;
	// GoErrImage says their addresses are link-time ones (@image).
	GoErr      []GoErrCase
	GoErrImage bool

	code    []insn // the kernel-style fetch instructions, ended by opEnd
	lenCode []insn // PTR,LEN:gostring: the fetch of LEN, ended by opEnd
}

// Bitfield is a b<bit-width>@<bit-offset>/<container-size> type.
type Bitfield struct {
	Width, Offset, Container int  // in bits
	Signed                   bool // sb<width>@<offset>/<container>: sign-extended
}

// EnumValue is one name of an enum table.
type EnumValue struct {
	Name  string
	Value uint64 // the element's bits, zero-extended (as element() reads them)
}

// FuncEntry reports whether the probe sits on a function entry (SYM or
// SYM+0, not a return probe): only there may $argN read registers. A return
// probe reads $argN from values saved at the function's entry.
func (p *Probe) FuncEntry() bool {
	return !p.Return && p.Symbol != "" && p.Offset == 0
}

// fetch operations: the kernel's FETCH_OP_* list, kept one to one so that
// "too much nested" and friends trigger exactly where the kernel's do.
type fop uint8

const (
	opNop fop = iota
	opReg
	opStack
	opStackP
	opRetval
	opImm
	opComm
	opData
	opArg    // function argument at entry, param = N-1
	opEArg   // function argument saved at entry, for return probes
	opSymbol // FETCH_NOP_SYMBOL: names the symbol whose address the next opImm holds
	opDeref
	opUDeref
	opStRaw
	opStMem
	opStUMem
	opStString
	opStUString
	opStSymstr
	opModBF
	opLpArray
	opEnd
	opXmm // kprewrite: the low 64 bits of SSE register xmm<param>
	// opStGoString (kprewrite) stores a Go string: param 0, its {pointer, length}
	// header is at the value plus offset; param 1, the value is the pointer and the
	// argument's lenCode fetches the length
	opStGoString
	// opStMemN (kprewrite) stores the elements at the value, as many as the
	// argument's lenCode says (at most the array's count), zeros after them
	opStMemN
	// opStGoErr (kprewrite) stores a Go error (goerr): the value is the type word,
	// the argument's lenCode fetches the data word
	opStGoErr
)

type insn struct {
	op     fop
	param  uint32 // register offset, stack slot, argument index, array count
	offset int32  // dereference offset (the kernel keeps it in an int)
	size   int    // store size
	imm    uint64
	data   string // symbol expression or immediate string
	lshift uint8
	rshift uint8
	signed bool // opModBF: an arithmetic right shift (sb<w>@<o>/<c>)
}

// Parse parses one definition in the kprobe event syntax, with the probe
// point written as a symbol of the binary (SYM[+offs], SYM%return) or an
// address (0xADDR). Errors are *ParseError with the kernel's message text
// and caret position.
func Parse(def string) (*Probe, error) {
	ps := &parser{def: def, argv: splitArgs(def)}
	ps.cmd = strings.Join(ps.argv, " ")
	p, perr := ps.parse()
	if perr != nil {
		return nil, perr
	}
	return p, nil
}

// splitArgs splits like the kernel's argv_split(): on any run of spaces.
func splitArgs(s string) []string {
	var out []string
	i := 0
	for i < len(s) {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		j := i
		for j < len(s) && !isSpace(s[j]) {
			j++
		}
		if j > i {
			out = append(out, s[i:j])
		}
		i = j
	}
	return out
}

type parser struct {
	def  string
	argv []string
	cmd  string
}

// errAt builds the error for word index (0-based) and offset in that word,
// computed as the kernel's trace_probe_log_err() does.
func (ps *parser) errAt(index, offset int, code ErrorCode) *ParseError {
	pos := 0
	for i := 0; i < index && i < len(ps.argv); i++ {
		pos += len(ps.argv[i]) + 1
	}
	return &ParseError{Def: ps.def, Command: ps.cmd, Pos: pos + offset, Code: code}
}

func (ps *parser) parse() (*Probe, *ParseError) {
	if len(ps.argv) == 0 {
		return nil, ps.errAt(0, 0, ErrBadCommand)
	}
	a0 := ps.argv[0]
	p := &Probe{Def: ps.def}
	switch a0[0] {
	case '-':
		return ps.parseDelete(p)
	case 'p':
	case 'r':
		p.Return = true
	default:
		return nil, ps.errAt(0, 0, ErrBadCommand)
	}

	// p[:...] or r[MAXACTIVE][:...]
	head, event, hasEvent := strings.Cut(a0[1:], ":")
	if head != "" {
		if !isDigit(head[0]) {
			return nil, ps.errAt(0, 1, ErrBadCommand)
		}
		if !p.Return {
			return nil, ps.errAt(0, 1, ErrBadMaxactType)
		}
		if len(head) > MaxEventNameLen-1 {
			return nil, ps.errAt(0, 1, ErrBadMaxact)
		}
		n, ok := kstrtouint(head, 0)
		if !ok || n == 0 {
			return nil, ps.errAt(0, 1, ErrBadMaxact)
		}
		if n > MaxActive {
			return nil, ps.errAt(0, 1, ErrMaxactTooBig)
		}
		p.MaxActive = int(n)
	}
	if len(ps.argv) < 2 {
		return nil, ps.errAt(1, 0, ErrNoProbePoint)
	}
	if len(ps.argv)-2 > MaxArgs {
		return nil, ps.errAt(2, 0, ErrTooManyArgs)
	}
	if perr := ps.parseSite(p); perr != nil {
		return nil, perr
	}
	p.Group = DefaultGroup
	if hasEvent {
		g, e, perr := ps.parseEventName(event, 1+len(head)+1)
		if perr != nil {
			return nil, perr
		}
		if g != "" {
			p.Group = g
		}
		p.Event = e
	}
	if p.Event == "" {
		p.Event = GeneratedEventName(p)
	}

	args := ps.argv[2:]
	p.Args = make([]Arg, 0, len(args))
	for i, a := range args {
		arg, perr := ps.parseArg(p, i, a)
		if perr != nil {
			return nil, perr
		}
		p.Args = append(p.Args, *arg)
	}
	return p, nil
}

// parseDelete parses "-:[GRP/][EVENT] [SITE [NAME=BODY...]]", what the kernel's
// dyn_event_release() takes: without a group it names the event in any group, with
// "GRP/" every event of the group; the words after it are kept to be matched (Match).
func (ps *parser) parseDelete(p *Probe) (*Probe, *ParseError) {
	a0 := ps.argv[0]
	if len(a0) < 2 || a0[1] != ':' {
		return nil, ps.errAt(0, 0, ErrBadCommand)
	}
	g, e, perr := ps.parseEventName(a0[2:], 2)
	if perr != nil {
		return nil, perr
	}
	p.Delete = true
	p.Group, p.Event = g, e
	if len(ps.argv) > 1 {
		p.Match = ps.argv[1:]
	}
	return p, nil
}

// parseSite parses SYM[+offs][%return] or an address, as the kprobe tracer, or
// LIB:SYM[+offs][%return] or LIB:OFFSET[%return] (a file offset), as the uprobe
// tracer takes PATH:OFFSET.
func (ps *parser) parseSite(p *Probe) *ParseError {
	s, at := ps.argv[1], 0
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if i == 0 || i == len(s)-1 {
			return ps.errAt(1, 0, ErrFileSite)
		}
		p.Lib, s, at = s[:i], s[i+1:], i+1
		if v, ok := kstrtoul(strings.TrimSuffix(s, "%return"), 0); ok {
			p.Addr, p.Return = v, p.Return || strings.HasSuffix(s, "%return")
			return nil
		}
	} else if v, ok := kstrtoul(s, 0); ok {
		p.Addr = v
		return nil
	}
	sym := s
	if i := strings.IndexByte(sym, '%'); i >= 0 {
		if sym[i:] != "%return" {
			return ps.errAt(1, at+i, ErrBadAddrSuffix)
		}
		sym = sym[:i]
		p.Return = true
	}
	var off int64
	if i := strings.IndexAny(sym, "+-"); i >= 0 {
		v, ok := kstrtol(sym[i:], 0)
		if !ok || v < 0 || v > 0xffffffff {
			return ps.errAt(1, at, ErrBadProbeAddr)
		}
		off = v
		sym = sym[:i]
	}
	// A symbol never starts with a digit.
	if sym == "" || isDigit(sym[0]) {
		return ps.errAt(1, at, ErrBadProbeAddr)
	}
	if p.Return && off != 0 {
		return ps.errAt(1, at, ErrBadRetprobe)
	}
	p.Symbol = sym
	p.Offset = uint64(off)
	return nil
}

// parseEventName is traceprobe_parse_event_name(): [GROUP/][EVENT], where
// '.' also separates when there is no '/'. offset is where event starts in
// argv[0]. An empty event after a group means "generate one".
func (ps *parser) parseEventName(event string, offset int) (group, name string, perr *ParseError) {
	slash := strings.IndexByte(event, '/')
	if slash < 0 {
		slash = strings.IndexByte(event, '.')
	}
	if slash >= 0 {
		if slash == 0 {
			return "", "", ps.errAt(0, offset, ErrNoGroupName)
		}
		if slash+1 > MaxEventNameLen {
			return "", "", ps.errAt(0, offset, ErrGroupTooLong)
		}
		group = event[:slash]
		if !isGoodSystemName(group) {
			return "", "", ps.errAt(0, offset, ErrBadGroupName)
		}
		offset += slash + 1
		event = event[slash+1:]
	}
	if event == "" {
		if slash >= 0 {
			return group, "", nil
		}
		return "", "", ps.errAt(0, offset, ErrNoEventName)
	}
	if len(event) >= MaxEventNameLen {
		return "", "", ps.errAt(0, offset, ErrEventTooLong)
	}
	if !isGoodName(event) {
		return "", "", ps.errAt(0, offset, ErrBadEventName)
	}
	return group, event, nil
}

// GeneratedEventName is the event name used when a definition gives none,
// derived as kprobes do: "p_" or "r_", the symbol, "_", the decimal offset
// ("p_main_0", "r_parse_0", "p_foo_12"), or "p_0x" and the hex address for
// an address ("p_0x401136"). Every byte that is not a letter, digit or '_'
// becomes '_' (kprobes replace only ':' and '.'), and the name is cut to 63
// bytes.
func GeneratedEventName(p *Probe) string {
	c := byte('p')
	if p.Return {
		c = 'r'
	}
	var s string
	switch {
	case p.Lib != "" && p.Symbol == "":
		// the uprobe tracer's name: 'p' (for return probes too), the file's base
		// name up to its first '.', '-' or '_', and the offset
		s = "p_" + libTail(p.Lib) + "_" + hexStr(p.Addr)
	case p.Lib != "":
		s = string(c) + "_" + libTail(p.Lib) + "_" + p.Symbol + "_" + strconv.FormatUint(p.Offset, 10)
	case p.Symbol != "":
		s = string(c) + "_" + p.Symbol + "_" + strconv.FormatUint(p.Offset, 10)
	default:
		s = string(c) + "_" + hexStr(p.Addr)
	}
	s = SanitizeName(s)
	if len(s) > MaxEventNameLen-1 {
		s = s[:MaxEventNameLen-1]
	}
	return s
}

// SanitizeName makes s a good event name as generated names are made: every byte that
// is not a letter, digit or '_' becomes '_', and so does a leading digit ("_" for "").
func SanitizeName(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !isAlpha(ch) && !(isDigit(ch) && i > 0) && ch != '_' {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// libTail is what the uprobe tracer names a file by in generated event names: its base
// name cut at the first '.', '-' or '_'.
func libTail(lib string) string {
	t := lib[strings.LastIndexByte(lib, '/')+1:]
	if i := strings.IndexAny(t, ".-_"); i >= 0 {
		t = t[:i]
	}
	return t
}

// argParser holds the state of traceprobe_parse_probe_arg() for one argument.
type argParser struct {
	ps     *parser
	index  int // word index of the argument in argv
	code   [fetchInsnMax]insn
	pc     int // the kernel's "code" pointer
	offset int // the kernel's ctx->offset
	fentry bool
	ret    bool
}

func (ap *argParser) err(offset int, code ErrorCode) *ParseError {
	return ap.ps.errAt(ap.index, offset, code)
}

// parseArg is traceprobe_parse_probe_arg() and _body(); i is 0-based.
func (ps *parser) parseArg(p *Probe, i int, a string) (*Arg, *ParseError) {
	ap := &argParser{ps: ps, index: i + 2, fentry: p.FuncEntry(), ret: p.Return}
	arg := &Arg{}
	body := a
	if eq := strings.IndexByte(a, '='); eq >= 0 {
		if eq > MaxArgNameLen {
			return nil, ap.err(0, ErrArgNameTooLong)
		}
		if eq == 0 {
			return nil, ap.err(0, ErrNoArgName)
		}
		arg.Name = a[:eq]
		body = a[eq+1:]
		ap.offset = eq + 1
	} else {
		// Without BTF the kernel names every unnamed argument argN
		// (checked: "arg2=%di b" collides on arg2).
		arg.Name = "arg" + strconv.Itoa(i+1)
	}
	if !isGoodName(arg.Name) {
		return nil, ap.err(0, ErrBadArgName)
	}
	for _, r := range reservedNames {
		if arg.Name == r {
			return nil, ap.err(0, ErrUsedArgName)
		}
	}
	for j := range p.Args {
		if p.Args[j].Name == arg.Name {
			return nil, ap.err(0, ErrUsedArgName)
		}
	}
	arg.Body = body
	if perr := ap.parseBody(arg, body); perr != nil {
		return nil, perr
	}
	return arg, nil
}

// parseBody is traceprobe_parse_probe_arg_body().
func (ap *argParser) parseBody(arg *Arg, body string) *ParseError {
	// an enum table after the type is not part of the fetch expression
	table, tableOff := "", 0
	if c := strings.IndexByte(body, ':'); c >= 0 {
		if b := strings.IndexByte(body[c:], '{'); b >= 0 {
			tableOff = c + b
			body, table = body[:tableOff], body[tableOff:]
		}
	}
	if len(body) > MaxArgStrLen {
		return ap.err(ap.offset, ErrArgTooLong)
	}
	if body == "" {
		return ap.err(ap.offset, ErrNoArgBody)
	}
	base := ap.offset
	t, perr := ap.parseArgType(body, base)
	if perr != nil {
		return perr
	}
	ft, perr := ap.fetchTypeOf(t, base)
	if perr != nil {
		return perr
	}

	if ft.name == "goerr" {
		if perr := ap.parseGoErr(arg, t, table, tableOff, base); perr != nil {
			return perr
		}
		arg.Type, arg.Kind, arg.Size = ft.name, ft.kind, ft.size
		return nil
	}
	if ft.name == "gostring" {
		if perr := ap.parseGoString(arg, t, base); perr != nil {
			return perr
		}
		arg.Type, arg.Kind, arg.Size = ft.name, ft.kind, ft.size
		return nil
	}
	var bf *Bitfield
	if strings.Contains(t.expr, ",") && t.count > 0 && !ft.isString {
		if perr := ap.parseCountedArray(arg, t, ft, base); perr != nil {
			return perr
		}
	} else {
		ap.resetCode()
		if perr := ap.parseProbeArg(t.expr); perr != nil {
			return perr
		}
		// The kernel leaves ctx->offset just inside the outermost '(' of a
		// dereference, and measures the errors below from there.
		if bf, perr = ap.finishCode(ft, t); perr != nil {
			return perr
		}
		arg.code = append([]insn(nil), ap.code[:ap.pc+1]...)
	}

	arg.Type = ft.name
	arg.Kind = ft.kind
	arg.Size = ft.size
	arg.Count = t.count
	arg.Bitfield = bf
	if tableOff > 0 {
		switch ft.kind {
		case KindUnsigned, KindSigned, KindHex:
		default:
			return ap.err(base+tableOff, ErrBadEnum)
		}
		enum, at := parseEnumTable(table, ft)
		if at >= 0 {
			return ap.err(base+tableOff+at, ErrBadEnum)
		}
		arg.Enum = enum
	}
	return nil
}

func (ap *argParser) resetCode() {
	for k := range ap.code {
		ap.code[k] = insn{}
	}
	ap.code[fetchInsnMax-1].op = opEnd
	ap.pc = 0
}

// parseGoString parses the body of a gostring (a kprewrite type, no array, no
// table): +OFF(...) is the address of the string's {pointer, length} header, and
// PTR,LEN are two fetches that give the pointer and the length (where Go's register
// ABI and its DWARF put the two words in two places).
func (ap *argParser) parseGoString(arg *Arg, t argType, base int) *ParseError {
	if t.count > 0 {
		return ap.err(base+t.tOff, ErrBadString)
	}
	ptr, _, pair := strings.Cut(t.expr, ",")
	ap.resetCode()
	if perr := ap.parseProbeArg(ptr); perr != nil {
		return perr
	}
	if !pair {
		last := &ap.code[ap.pc]
		if last.op != opDeref && last.op != opUDeref {
			return ap.err(base+t.tOff, ErrBadString)
		}
		last.op = opStGoString
	} else {
		ap.pc++
		if ap.code[ap.pc].op != opNop {
			return ap.err(ap.offset, ErrTooManyOps)
		}
		ap.code[ap.pc] = insn{op: opStGoString, param: 1}
	}
	ap.pc++
	ap.code[ap.pc] = insn{op: opEnd}
	arg.code = append([]insn(nil), ap.code[:ap.pc+1]...)
	if !pair {
		return nil
	}
	return ap.parseLength(arg, t.expr, base)
}

// parseLength parses the LEN of a PTR,LEN body (gostring, or a counted array) into
// the argument's lenCode: a value, no string.
func (ap *argParser) parseLength(arg *Arg, expr string, base int) *ParseError {
	ptr, length, _ := strings.Cut(expr, ",")
	ap.resetCode()
	ap.offset = base + len(ptr) + 1
	if perr := ap.parseProbeArg(length); perr != nil {
		return perr
	}
	switch ap.code[0].op {
	case opComm, opData, opXmm:
		return ap.err(base+len(ptr)+1, ErrBadString)
	}
	ap.pc++
	ap.code[ap.pc] = insn{op: opEnd}
	arg.lenCode = append([]insn(nil), ap.code[:ap.pc+1]...)
	return nil
}

// parseCountedArray parses PTR,LEN:TYPE[N] (kprewrite): the N elements at the
// address PTR gives, of which the first LEN are read and the rest stored as zeros
// (a Go slice's array: its length, never past it).
func (ap *argParser) parseCountedArray(arg *Arg, t argType, ft *fetchType, base int) *ParseError {
	if strings.HasPrefix(t.typ, "b") || strings.HasPrefix(t.typ, "sb") {
		return ap.err(base+t.tOff, ErrBadBitfield)
	}
	ptr, _, _ := strings.Cut(t.expr, ",")
	ap.resetCode()
	if perr := ap.parseProbeArg(ptr); perr != nil {
		return perr
	}
	switch ap.code[ap.pc].op {
	case opComm, opData, opXmm:
		return ap.err(base, ErrBadString)
	}
	if ap.pc+3 >= fetchInsnMax {
		return ap.err(ap.offset, ErrTooManyOps)
	}
	ap.code[ap.pc+1] = insn{op: opStMemN, size: ft.size}
	ap.code[ap.pc+2] = insn{op: opLpArray, param: uint32(t.count)}
	ap.code[ap.pc+3] = insn{op: opEnd}
	ap.pc += 3
	arg.code = append([]insn(nil), ap.code[:ap.pc+1]...)
	return ap.parseLength(arg, t.expr, base)
}

// argType is an argument's body split at its type: the fetch expression, the type's
// name without an array suffix, the type's offset from the body's start (0 without
// one), and the array's length (0: not an array).
type argType struct {
	expr    string
	typ     string
	hasType bool
	tOff    int
	count   int
}

// parseArgType is the first half of parse_probe_arg_type(): it splits the body at
// ':' and reads a "[N]" array suffix, which must close, end the type and give a
// length from 1 to MaxArrayLen. base is the body's offset in the argument.
func (ap *argParser) parseArgType(body string, base int) (argType, *ParseError) {
	t := argType{expr: body}
	c := strings.IndexByte(body, ':')
	if c < 0 {
		return t, nil
	}
	t.hasType = true
	t.typ = body[c+1:]
	t.expr = body[:c]
	t.tOff = c + 1
	b := strings.IndexByte(t.typ, '[')
	if b < 0 {
		return t, nil
	}
	num := t.typ[b+1:]
	numOff := t.tOff + b + 1
	t.typ = t.typ[:b]
	r := strings.IndexByte(num, ']')
	if r < 0 {
		return t, ap.err(base+numOff+len(num), ErrArrayNoClose)
	}
	if r+1 != len(num) {
		return t, ap.err(base+numOff+r+1, ErrBadArraySuffix)
	}
	n, ok := kstrtouint(num[:r], 0)
	if !ok || n == 0 {
		return t, ap.err(base+numOff, ErrBadArrayNum)
	}
	if n > MaxArrayLen {
		return t, ap.err(base+numOff, ErrArrayTooBig)
	}
	t.count = int(n)
	return t, nil
}

// fetchTypeOf picks the argument's fetch type: $comm and an immediate string are
// strings (and refuse any other type, or an array), else the named type, else
// defaultType.
func (ap *argParser) fetchTypeOf(t argType, base int) (*fetchType, *ParseError) {
	var ft *fetchType
	if t.expr == "$comm" || t.expr == "$COMM" || strings.HasPrefix(t.expr, `\"`) {
		if t.count > 0 || (t.hasType && t.typ != "string") {
			return nil, ap.err(base+t.tOff, ErrNeedStringType)
		}
		ft = findFetchType("string")
	} else if t.hasType {
		ft = findFetchType(t.typ)
	} else {
		ft = findFetchType(defaultType)
	}
	if ft == nil {
		return nil, ap.err(base+t.tOff, ErrBadType)
	}
	return ft, nil
}

// finishCode ends the fetch program after parseProbeArg's instructions: the store
// of the type, a bitfield's parameters, the array loop, then the end. Errors are
// measured from the offset parseProbeArg left.
func (ap *argParser) finishCode(ft *fetchType, t argType) (*Bitfield, *ParseError) {
	at := ap.offset
	if perr := ap.storeInsn(ft, t.count, at+t.tOff); perr != nil {
		return nil, perr
	}
	code := &ap.code
	scode := ap.pc
	var bf *Bitfield
	if t.hasType && (strings.HasPrefix(t.typ, "b") || strings.HasPrefix(t.typ, "sb")) {
		var ok bool
		bf, ok = ap.parseBitfield(t.typ, ft)
		if !ok {
			return nil, ap.err(at+t.tOff, ErrBadBitfield)
		}
	}
	if t.count > 0 {
		switch code[scode].op {
		case opStMem, opStString, opStUString:
		default:
			return nil, ap.err(at+t.tOff, ErrBadString)
		}
		ap.pc++
		if code[ap.pc].op != opNop {
			return nil, ap.err(at, ErrTooManyOps)
		}
		code[ap.pc] = insn{op: opLpArray, param: uint32(t.count)}
	}
	ap.pc++
	code[ap.pc] = insn{op: opEnd}
	return bf, nil
}

// storeInsn turns the fetch's last instruction into a store of ft, or appends one:
// a string is read from memory, an immediate, $comm or a symbol's name (symstr from a
// value), anything else is stored raw or read from (user) memory. typeAt is where a
// type error points.
func (ap *argParser) storeInsn(ft *fetchType, count, typeAt int) *ParseError {
	at := ap.offset
	code := &ap.code
	last := code[ap.pc].op
	if ft.isString {
		if ft.name == "symstr" {
			switch last {
			case opReg, opStack, opRetval, opArg, opDeref:
			default:
				return ap.err(typeAt, ErrBadSymstring)
			}
		} else {
			switch last {
			case opDeref, opUDeref, opImm, opComm, opData:
			default:
				return ap.err(typeAt, ErrBadString)
			}
		}
		if ft.name == "symstr" || last == opImm || last == opComm || last == opData || count > 0 {
			ap.pc++
			if code[ap.pc].op != opNop {
				return ap.err(at, ErrTooManyOps)
			}
		}
		st := code[ap.pc]
		switch {
		case ft.name == "ustring" || st.op == opUDeref:
			st.op = opStUString
		case ft.name == "symstr":
			st.op = opStSymstr
		default:
			st.op = opStString
		}
		st.size = ft.size
		code[ap.pc] = st
	} else if last == opDeref {
		code[ap.pc].op = opStMem
		code[ap.pc].size = ft.size
	} else if last == opUDeref {
		code[ap.pc].op = opStUMem
		code[ap.pc].size = ft.size
	} else {
		ap.pc++
		if code[ap.pc].op != opNop {
			return ap.err(at, ErrTooManyOps)
		}
		code[ap.pc] = insn{op: opStRaw, size: ft.size}
	}
	return nil
}

// maxEnumValues bounds an enum table.
const maxEnumValues = 1 << 16

// parseEnumTable parses "{NAME=VALUE,...}" for elements of type ft; it returns the
// table, or the offset of its first error (else -1). Names are C identifiers (C++
// scopes allowed; and Go's type names, main.T, *net/http.Request, which name an
// interface's dynamic type) and unique; values are integers that fit ft.
func parseEnumTable(s string, ft *fetchType) ([]EnumValue, int) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, 0
	}
	bits := uint(8 * ft.size)
	var out []EnumValue
	seen := map[string]bool{}
	at := 1
	for _, ent := range strings.Split(s[1:len(s)-1], ",") {
		name, val, ok := strings.Cut(ent, "=")
		if !ok || !isEnumName(name) || seen[name] || len(out) == maxEnumValues {
			return nil, at
		}
		seen[name] = true
		var v uint64
		if ft.kind == KindSigned {
			n, ok := kstrtol(val, 0)
			if !ok || bits < 64 && (n < -1<<(bits-1) || n >= 1<<(bits-1)) {
				return nil, at + len(name) + 1
			}
			v = uint64(n)
		} else {
			n, ok := kstrtoul(val, 0)
			if !ok || bits < 64 && n>>bits != 0 {
				return nil, at + len(name) + 1
			}
			v = n
		}
		if bits < 64 {
			v &= 1<<bits - 1
		}
		out = append(out, EnumValue{Name: name, Value: v})
		at += len(ent) + 1
	}
	return out, -1
}

func isEnumName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' || s[0] == ':' || s[len(s)-1] == ':' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == ':' || c == '.' || c == '/' || c == '-' || c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// EnumName returns the name of an element's value in the argument's enum table.
func (a *Arg) EnumName(v uint64) (string, bool) {
	for _, e := range a.Enum {
		if e.Value == v {
			return e.Name, true
		}
	}
	return "", false
}

// parseBitfield is __parse_bitfield_probe_arg(). Unlike the kernel it also
// refuses widths or offsets beyond the container that would only pass the
// kernel's check through unsigned wrap-around.
func (ap *argParser) parseBitfield(t string, ft *fetchType) (*Bitfield, bool) {
	signed := strings.HasPrefix(t, "s")
	if signed {
		t = t[1:]
	}
	bw, tail := simpleStrtoul(t[1:], 0)
	if bw == 0 || tail == "" || tail[0] != '@' {
		return nil, false
	}
	bf := tail[1:]
	bo, tail := simpleStrtoul(bf, 0)
	if len(tail) == len(bf) || tail == "" || tail[0] != '/' {
		return nil, false
	}
	ap.pc++
	if ap.code[ap.pc].op != opNop {
		return nil, false
	}
	bits := uint64(ft.size * 8)
	if bw > bits || bo > bits || bw+bo > bits {
		return nil, false
	}
	ap.code[ap.pc] = insn{op: opModBF, size: ft.size, signed: signed,
		lshift: uint8(bits - (bw + bo)), rshift: uint8(bits - bw)}
	return &Bitfield{Width: int(bw), Offset: int(bo), Container: int(bits), Signed: signed}, true
}

// parseProbeArg is the kernel's recursive parse_probe_arg().
func (ap *argParser) parseProbeArg(arg string) *ParseError {
	code := &ap.code
	var first byte
	if arg != "" {
		first = arg[0]
	}
	switch first {
	case '$':
		if perr := ap.parseVars(arg); perr != nil {
			return perr
		}
	case '%':
		if n, ok := xmmReg(arg[1:]); ok {
			code[ap.pc] = insn{op: opXmm, param: n}
			break
		}
		off, ok := RegOffset(arg[1:])
		if !ok {
			perr := ap.err(ap.offset, ErrBadRegName)
			if near := Nearest(arg[1:], ptRegs[:]); len(near) > 0 {
				for i := range near {
					near[i] = "%" + near[i]
				}
				perr.Hint = "did you mean " + OrList(near) + "?"
			}
			return perr
		}
		code[ap.pc] = insn{op: opReg, param: uint32(off)}
	case '@':
		switch {
		case len(arg) > 1 && isDigit(arg[1]):
			v, ok := kstrtoul(arg[1:], 0)
			if !ok {
				return ap.err(ap.offset, ErrBadMemAddr)
			}
			code[ap.pc] = insn{op: opImm, imm: v}
		case len(arg) > 1 && arg[1] == '+':
			return ap.err(ap.offset, ErrFileOnKprobe)
		default:
			if !validSymbolExpr(arg[1:]) {
				return ap.err(ap.offset, ErrBadMemAddr)
			}
			code[ap.pc] = insn{op: opSymbol, data: arg[1:]}
			ap.pc++
			if ap.pc == fetchInsnMax-1 {
				return ap.err(ap.offset, ErrTooManyOps)
			}
			code[ap.pc] = insn{op: opImm}
		}
		ap.pc++
		if ap.pc == fetchInsnMax-1 {
			return ap.err(ap.offset, ErrTooManyOps)
		}
		code[ap.pc] = insn{op: opDeref}
	case '+', '-':
		op := opDeref
		s := arg
		if len(s) > 1 && s[1] == 'u' {
			op = opUDeref
			s = s[:1] + s[2:]
		}
		if s[0] == '+' {
			s = s[1:]
		}
		lp := strings.IndexByte(s, '(')
		if lp < 0 {
			return ap.err(ap.offset, ErrDerefNeedBrace)
		}
		off, ok := kstrtol(s[:lp], 0)
		if !ok {
			return ap.err(ap.offset, ErrBadDerefOffs)
		}
		// The kernel's caret arithmetic, quirks included: after "+u" or
		// "+-" it points one byte early.
		adj := 1
		if s != "" && s[0] == '-' {
			adj = 0
		}
		ap.offset += lp + 1 + adj
		inner := s[lp+1:]
		rp := strings.LastIndexByte(inner, ')')
		if rp < 0 {
			return ap.err(ap.offset+len(inner), ErrDerefOpenBrace)
		}
		cur := ap.offset
		// Whatever follows the last ')' is ignored, as by the kernel.
		if perr := ap.parseProbeArg(inner[:rp]); perr != nil {
			return perr
		}
		ap.offset = cur
		if o := code[ap.pc].op; o == opComm || o == opData {
			return ap.err(ap.offset, ErrCommCantDeref)
		}
		ap.pc++
		if ap.pc == fetchInsnMax-1 {
			return ap.err(ap.offset, ErrTooManyOps)
		}
		code[ap.pc] = insn{op: op, offset: int32(off)}
	case '\\':
		if len(arg) > 1 && arg[1] == '"' {
			str := arg[2:]
			if str == "" || str[len(str)-1] != '"' {
				return ap.err(ap.offset+2+len(str), ErrImmstrNoClose)
			}
			code[ap.pc] = insn{op: opData, data: str[:len(str)-1]}
		} else {
			v, ok := strToImmediate(arg[1:])
			if !ok {
				return ap.err(ap.offset+1, ErrBadImm)
			}
			code[ap.pc] = insn{op: opImm, imm: v}
		}
	default:
		if isAlpha(first) || first == '_' {
			return ap.err(ap.offset, ErrNosupBTFArg)
		}
	}
	if code[ap.pc].op == opNop {
		return ap.err(ap.offset, ErrBadFetchArg)
	}
	return nil
}

// strToImmediate is the kernel's str_to_immediate().
func strToImmediate(s string) (uint64, bool) {
	switch {
	case s == "":
		return 0, false
	case isDigit(s[0]):
		return kstrtoul(s, 0)
	case s[0] == '-':
		v, ok := kstrtol(s, 0)
		return uint64(v), ok
	case s[0] == '+':
		v, ok := kstrtol(s[1:], 0)
		return uint64(v), ok
	}
	return 0, false
}

// validSymbolExpr checks SYM[+|-offs] after '@'.
func validSymbolExpr(s string) bool {
	_, _, ok := splitSymbolOffset(s)
	return ok
}

// splitSymbolOffset is traceprobe_split_symbol_offset() plus a check that
// the symbol is non-empty and does not start with a digit.
func splitSymbolOffset(s string) (sym string, off int64, ok bool) {
	sym = s
	if i := strings.IndexAny(s, "+-"); i >= 0 {
		off, ok = kstrtol(s[i:], 0)
		if !ok {
			return "", 0, false
		}
		sym = s[:i]
	}
	if sym == "" || isDigit(sym[0]) {
		return "", 0, false
	}
	return sym, off, true
}

// parseVars is parse_probe_vars(): $retval, $stack, $stackN, $comm, $argN.
func (ap *argParser) parseVars(arg string) *ParseError {
	code := &ap.code
	v := arg[1:]
	if strings.HasPrefix(v, "retval") { // the kernel takes any "$retval..." prefix
		if !ap.ret {
			return ap.err(ap.offset, ErrRetvalOnProbe)
		}
		code[ap.pc] = insn{op: opRetval}
		return nil
	}
	if r, ok := strings.CutPrefix(v, "stack"); ok {
		if r == "" {
			code[ap.pc] = insn{op: opStackP}
			return nil
		}
		if isDigit(r[0]) {
			n, ok := kstrtoul(r, 10)
			if !ok {
				return ap.err(ap.offset, ErrBadVar)
			}
			// kprobes refuse a slot past PARAM_MAX_STACK (kprobe_syntax_errors.tc:
			// "p vfs_read ^$stack10000"); the uprobe tracer takes any, truncated to 32 bits
			if n > MaxParamStack {
				return ap.err(ap.offset, ErrBadStackNum)
			}
			code[ap.pc] = insn{op: opStack, param: uint32(n)}
			return nil
		}
		return ap.err(ap.offset, ErrBadVar)
	}
	if v == "comm" || v == "COMM" {
		code[ap.pc] = insn{op: opComm}
		return nil
	}
	if r, ok := strings.CutPrefix(v, "arg"); ok {
		n, ok := kstrtoul(r, 10)
		if !ok {
			return ap.err(ap.offset, ErrBadVar)
		}
		if n == 0 || n > MaxParamStack {
			return ap.err(ap.offset, ErrBadArgNum)
		}
		switch {
		case ap.fentry:
			code[ap.pc] = insn{op: opArg, param: uint32(n - 1)}
		case ap.ret:
			code[ap.pc] = insn{op: opEArg, param: uint32(n - 1)}
		default:
			return ap.err(ap.offset, ErrNofentryArgs)
		}
		return nil
	}
	return ap.err(ap.offset, ErrBadVar)
}
