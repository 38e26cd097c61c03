package evfilter

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/internal/eventdef"
)

// ErrCode is one of the kernel's filter errors (its err_text).
type ErrCode int

// The kernel's filter errors, in its order.
const (
	ErrNone ErrCode = iota
	ErrInvalidOp
	ErrTooManyOpen
	ErrTooManyClose
	ErrMissingQuote
	ErrMissingBraceOpen
	ErrMissingBraceClose
	ErrOperandTooLong
	ErrExpectString
	ErrExpectDigit
	ErrIllegalFieldOp
	ErrFieldNotFound
	ErrIllegalIntval
	ErrBadSubsysFilter
	ErrTooManyPreds
	ErrInvalidFilter
	ErrInvalidCPUList
	ErrIPFieldOnly
	ErrInvalidValue
	ErrNoFunction
	ErrErrno
	ErrNoFilter
)

var errText = [...]string{
	"No error", "Invalid operator", "Too many '('", "Too few '('", "Missing matching quote",
	"Missing '{'", "Missing '}'", "Operand too long", "Expecting string field",
	"Expecting numeric field", "Illegal operation for field type", "Field not found",
	"Illegal integer value", "Couldn't find or set field in one of a subsystem's events",
	"Too many terms in predicate expression", "Meaningless filter expression", "Invalid cpulist",
	"Only 'ip' field is supported for function trace", "Invalid value (did you forget quotes)?",
	"Function not found", "Error", "No filter found",
}

// Error is a filter the kernel would refuse. Code 0 is the kernel's bare "Error: (0)"
// (a filter with no predicate, or an operator where a field should be); Detail, when
// set, is a refusal of kprewrite's own (something the kernel accepts that cannot be
// done in user space) and Code is then ErrInvalidValue.
type Error struct {
	Expr   string
	Pos    int // the kernel's lasterr_pos
	Code   ErrCode
	Detail string
}

func (e *Error) Error() string {
	switch {
	case e.Detail != "":
		return "parse_error: " + e.Detail
	case e.Code == ErrNone:
		return "Error: (0)"
	}
	return "parse_error: " + errText[e.Code]
}

// Message is the kernel's error text for the code.
func (e *Error) Message() string {
	if e.Detail != "" {
		return e.Detail
	}
	return errText[e.Code]
}

// Column is where the kernel's filter file puts the caret under the expression.
func (e *Error) Column() int {
	if e.Code == ErrNone && e.Detail == "" || e.Pos < 0 {
		return -1
	}
	return min(e.Pos, len(e.Expr))
}

// maxShown is how much of an expression refused as a whole an error shows.
const maxShown = 200

// FilterFile is what the kernel's filter file shows after the filter was refused:
// the expression, a caret, the message.
func (e *Error) FilterFile() string {
	if c := e.Column(); c >= 0 {
		return fmt.Sprintf("%s\n%s^\n%s\n", e.Expr, strings.Repeat(" ", c), e.Error())
	}
	expr := e.Expr
	if len(expr) > maxShown { // a refusal of the whole (too long): its start says which
		expr = fmt.Sprintf("%s... (%d bytes)", expr[:maxShown], len(expr))
	}
	return fmt.Sprintf("%s\n%s\n", expr, e.Error())
}

// Symbols resolves the functions a .function predicate names (link-time addresses).
type Symbols interface {
	// Func returns the function named name.
	Func(name string) (addr, size uint64, ok bool)
	// FuncAt returns the function that holds addr.
	FuncAt(addr uint64) (start, size uint64, ok bool)
}

// Filter is a parsed filter: its text and its program.
type Filter struct {
	Expr  string
	preds []pred
	prog  []entry
}

// maxStrVal is the kernel's MAX_FILTER_STR_VAL.
const maxStrVal = 256

const (
	opGlob = iota
	opNE
	opEQ
	opLE
	opLT
	opGE
	opGT
	opBand
)

var ops = [...]string{"~", "!=", "==", "<=", "<", ">=", ">", "&"}

// Fn values of a program entry.
const (
	FnNop = iota
	FnEq
	FnCmp
	FnCPU
	FnString
	FnFunc
)

// Match types of an FnString entry: the kernel's regex_type.
const (
	MatchFull = iota
	MatchFront
	MatchMiddle
	MatchEnd
	MatchGlob
)

type pred struct {
	fn      uint8
	src     Source
	op      uint8
	size    uint8
	signed  bool
	not     bool
	match   uint8
	off     int
	val     uint64
	val2    uint64
	pattern string
	biased  bool // val and val2 are link-time addresses: the runtime adds the load bias
}

type entry struct {
	pred   int
	when   bool
	target int // the next entry when the predicate's result equals when
}

// Parse compiles expr for an event with the given fields (Fields). syms resolves
// .function names (nil: none are found). The kernel clears a filter written as "0";
// callers handle that before calling Parse.
func Parse(expr string, fields []Field, syms Symbols) (*Filter, error) {
	if k := strings.IndexByte(expr, 0); k >= 0 {
		expr = expr[:k] // a C string
	}
	expr = strings.TrimRight(expr, " \t\n\v\f\r")
	p := &parser{s: expr, fields: fields, syms: syms}
	nparens, npreds, err := p.calcStack()
	if err != nil {
		return nil, err
	}
	if npreds == 0 {
		return nil, &Error{Expr: expr}
	}
	f := &Filter{Expr: expr}
	if err := p.predicateParse(f, nparens, npreds); err != nil {
		return nil, err
	}
	if err := f.checkSize(); err != nil {
		return nil, err
	}
	return f, nil
}

type parser struct {
	s      string
	fields []Field
	syms   Symbols
}

// at is the C string's byte i: 0 past the end.
func (p *parser) at(i int) byte {
	if i < 0 || i >= len(p.s) {
		return 0
	}
	return p.s[i]
}

func (p *parser) fail(code ErrCode, pos int) error {
	return &Error{Expr: p.s, Pos: pos, Code: code}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isAlnum(c byte) bool {
	return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// calcStack is calc_stack: counts predicates and the parentheses' depth, and finds
// unbalanced parentheses and quotes.
func (p *parser) calcStack() (parens, preds int, err error) {
	isPred, quote, lastQuote := false, byte(0), 0
	open, maxOpen := 1, 1
	i := 0
	for ; i < len(p.s); i++ {
		c := p.s[i]
		if isSpace(c) {
			continue
		}
		if quote != 0 {
			if c == quote {
				quote = 0
			}
			continue
		}
		switch c {
		case '\'', '"':
			quote, lastQuote = c, i
		case '|', '&':
			if p.at(i+1) == c {
				isPred = false
				continue
			}
		case '(':
			isPred = false
			open++
			maxOpen = max(maxOpen, open)
			continue
		case ')':
			isPred = false
			if open == 1 {
				return 0, 0, p.fail(ErrTooManyClose, i)
			}
			open--
			continue
		}
		if !isPred {
			preds++
			isPred = true
		}
	}
	if quote != 0 {
		return 0, 0, p.fail(ErrMissingQuote, lastQuote)
	}
	if open != 1 {
		level := open
		for i--; i > 0; i-- {
			c := p.s[i]
			if quote != 0 {
				if c == quote {
					quote = 0
				}
				continue
			}
			switch c {
			case '(':
				if level == open {
					return 0, 0, p.fail(ErrTooManyOpen, i)
				}
				level--
			case ')':
				level++
			case '\'', '"':
				quote = c
			}
		}
		return 0, 0, p.fail(ErrTooManyOpen, 0)
	}
	return maxOpen, preds, nil
}

const (
	flInvert     = 1
	flProcessAnd = 2
	flProcessOr  = 4
)

// predicateParse is predicate_parse: the first pass builds the program with the
// kernel's update_preds, the second shortens branches to branches, the third folds
// the inversions into the branch conditions.
func (p *parser) predicateParse(f *Filter, nparens, npreds int) error {
	npreds += 2 // TRUE and FALSE
	b := &progBuilder{p: p, f: f, prog: make([]progEntry, npreds), inverts: make([]int, npreds), stack: []int{0}}
	ptr, err := b.build(nparens, npreds)
	if err != nil {
		return err
	}
	if b.stack[len(b.stack)-1]&(flProcessAnd|flProcessOr) != 0 {
		// a && or || with nothing after it (Linux 6.18 refuses it here; older kernels
		// took the filter as if it were not there)
		return p.fail(ErrInvalidFilter, ptr)
	}
	if len(b.stack) != 1 {
		return p.fail(ErrTooManyOpen, ptr)
	}
	if b.n == 0 {
		return p.fail(ErrNoFilter, ptr)
	}
	if err := b.shortenBranches(); err != nil {
		return err
	}
	return b.foldInversions()
}

// progEntry is one entry of the kernel's prog_entry array while it is built: the
// entry to go to, the result that takes the branch, and the predicate tested.
type progEntry struct {
	target int
	when   int
	pred   int
}

// progBuilder is predicate_parse's working state: the program, the inversion each
// predicate was read under, the open parentheses' flags (flInvert, flProcessAnd,
// flProcessOr), the inversion pending for the next predicate, and the predicates read.
type progBuilder struct {
	p       *parser
	f       *Filter
	prog    []progEntry
	inverts []int
	stack   []int
	invert  int
	n       int
}

// update is update_preds: entry at's pending target (a chain threaded through the
// targets) is made to branch to at when its result is inv.
func (b *progBuilder) update(at, inv int) error {
	prog := b.prog
	t := prog[at].target
	if t < 0 || t >= len(prog) {
		return &Error{Expr: b.p.s}
	}
	s := prog[t].target
	prog[t].when = inv
	prog[t].target = at
	prog[at].target = s
	return nil
}

// build is predicate_parse's first pass: it reads parentheses, inversions and
// predicates, each followed by its connective, and returns where it stopped.
func (b *progBuilder) build(nparens, npreds int) (int, error) {
	p := b.p
	ptr := 0
	for p.at(ptr) != 0 {
		next := ptr
		ptr++
		c := p.at(next)
		if isSpace(c) {
			continue
		}
		switch c {
		case '(':
			if len(b.stack)-1 > nparens {
				return 0, &Error{Expr: p.s}
			}
			b.stack = append(b.stack, b.invert)
			continue
		case '!':
			if p.at(next+1) != '=' && p.at(next+1) != '~' {
				b.invert ^= 1
				continue
			}
		}
		if b.n >= npreds {
			return 0, p.fail(ErrTooManyPreds, next)
		}
		b.inverts[b.n] = b.invert
		b.prog[b.n].target = b.n - 1
		length, pr, err := p.parsePred(next, ptr)
		if err != nil {
			return 0, err
		}
		b.prog[b.n].pred = len(b.f.preds)
		b.f.preds = append(b.f.preds, pr)
		ptr = next + length
		b.n++
		var end bool
		if ptr, end, err = b.connective(ptr); err != nil || end {
			return ptr, err
		}
	}
	return ptr, nil
}

// connective reads what follows a predicate: && or || (linking it into the
// enclosing group's chains), closing parentheses, or the end of the expression
// (end is true).
func (b *progBuilder) connective(ptr int) (_ int, end bool, _ error) {
	p := b.p
	for {
		next := ptr
		ptr++
		c := p.at(next)
		if isSpace(c) {
			continue
		}
		switch c {
		case ')', 0:
		case '&', '|':
			if p.at(next+1) != c {
				return 0, false, p.fail(ErrTooManyPreds, next)
			}
			ptr++
		default:
			return 0, false, p.fail(ErrTooManyPreds, next)
		}
		top := &b.stack[len(b.stack)-1]
		b.invert = *top & flInvert
		if *top&flProcessAnd != 0 {
			if err := b.update(b.n-1, b.invert); err != nil {
				return 0, false, err
			}
			*top &^= flProcessAnd
		}
		if c == '&' {
			*top |= flProcessAnd
			return ptr, false, nil
		}
		if *top&flProcessOr != 0 {
			if err := b.update(b.n-1, b.invert^1); err != nil {
				return 0, false, err
			}
			*top &^= flProcessOr
		}
		if c == '|' {
			*top |= flProcessOr
			return ptr, false, nil
		}
		if c == 0 {
			return ptr, true, nil
		}
		if len(b.stack) == 1 {
			return 0, false, p.fail(ErrTooManyClose, ptr)
		}
		b.stack = b.stack[:len(b.stack)-1]
	}
}

// shortenBranches is the second pass: the last predicate falls to TRUE, and a
// branch to an entry that branches on the same result goes straight to that
// entry's target.
func (b *progBuilder) shortenBranches() error {
	prog, n := b.prog, b.n
	prog[n].target = 1 // TRUE
	prog[n+1].target = 0
	prog[n-1].target = n
	prog[n-1].when = 0
	for i := n - 1; i > 0; {
		i--
		t := prog[i].target
		if t < 0 || t >= len(prog) {
			return &Error{Expr: b.p.s}
		}
		if prog[i].when == prog[t].when {
			prog[i].target = prog[t].target
		}
	}
	return nil
}

// foldInversions is the third pass: each predicate's inversion goes into its
// branch condition, and the filter gets its program (branches only go forward).
func (b *progBuilder) foldInversions() error {
	prog := make([]entry, b.n)
	for i := 0; i < b.n; i++ {
		when := b.inverts[i] ^ b.prog[i].when
		if b.prog[i].target <= i {
			return &Error{Expr: b.p.s}
		}
		// the kernel's loop adds one after taking a branch
		prog[i] = entry{pred: b.prog[i].pred, when: when != 0, target: b.prog[i].target + 1}
	}
	b.f.prog = prog
	return nil
}

// parsePred is parse_pred for the predicate at str[start:]; pos is the kernel's pos
// argument (start+1). It returns the bytes it used.
func (p *parser) parsePred(start, pos int) (int, pred, error) {
	c := &predScan{p: p, start: start, pos: pos}
	field, function, op, err := c.fieldAndOp()
	if err != nil {
		return 0, pred{}, err
	}
	var pr pred
	pr.src, pr.off, pr.op, pr.size = field.Src, field.Off, uint8(op), uint8(min(field.Size, 255))
	switch {
	case function:
		err = c.funcValue(&pr, field, op)
	case strings.HasPrefix(c.rest(), "CPUS"):
		// a cpumask is checked against the CPUs of the machine that writes it; the
		// machine that runs the program may have others
		return 0, pr, &Error{Expr: p.s, Pos: pos + c.i, Code: ErrInvalidValue,
			Detail: "CPUS{} masks are not supported; compare cpu with numbers"}
	case c.cur() == '\'' || c.cur() == '"':
		err = c.stringValue(&pr, field, op)
	case isDigit(c.cur()) || c.cur() == '-' || len(field.Enum) > 0 && (isAlnum(c.cur()) || c.cur() == '_'):
		err = c.numberValue(&pr, field, op)
	default:
		err = c.fail(ErrInvalidValue)
	}
	if err != nil {
		return 0, pr, err
	}
	return c.i, pr, nil
}

// predScan is parse_pred's cursor: the predicate starts at the parser's byte start,
// i counts the bytes used so far, and pos+i is the column an error points at.
type predScan struct {
	p          *parser
	start, pos int
	i          int
}

// at is the predicate's byte k: 0 past the end.
func (c *predScan) at(k int) byte { return c.p.at(c.start + k) }

// cur is the byte under the cursor.
func (c *predScan) cur() byte { return c.at(c.i) }

// rest is the expression from the cursor on.
func (c *predScan) rest() string { return c.p.s[c.start+c.i:] }

// text is the predicate's bytes [s, e).
func (c *predScan) text(s, e int) string { return c.p.s[c.start+s : c.start+e] }

// skipSpace steps over the blanks the kernel allows between a predicate's parts.
func (c *predScan) skipSpace() {
	for isSpace(c.cur()) {
		c.i++
	}
}

// fail reports code at the cursor.
func (c *predScan) fail(code ErrCode) error { return c.p.fail(code, c.pos+c.i) }

// fieldAndOp reads the predicate's left side: the field's name with its .ustring or
// .function suffix, then the operator; the cursor ends on the value.
func (c *predScan) fieldAndOp() (field *Field, function bool, op int, err error) {
	c.skipSpace()
	s := c.i
	for isAlnum(c.cur()) || c.cur() == '_' {
		c.i++
	}
	if c.i == s {
		return nil, false, 0, &Error{Expr: c.p.s}
	}
	field = findField(c.p.fields, c.text(s, c.i))
	if field == nil {
		return nil, false, 0, c.fail(ErrFieldNotFound)
	}
	if strings.HasPrefix(c.rest(), ".ustring") {
		c.i += len(".ustring")
	}
	if strings.HasPrefix(c.rest(), ".function") {
		function = true
		c.i += len(".function")
	}
	c.skipSpace()
	op = -1
	for k, o := range ops {
		if strings.HasPrefix(c.rest(), o) {
			op = k
			break
		}
	}
	if op < 0 {
		return nil, false, 0, c.fail(ErrInvalidOp)
	}
	c.i += len(ops[op])
	c.skipSpace()
	return field, function, op, nil
}

// funcValue reads a .function operand, an address or a function's name, and makes
// the predicate test that the field points into that function's range.
func (c *predScan) funcValue(pr *pred, field *Field, op int) error {
	if field.Size != 8 {
		return c.fail(ErrIllegalFieldOp)
	}
	if op != opEQ && op != opNE {
		return c.fail(ErrInvalidOp)
	}
	addr, err := c.funcAddr()
	if err != nil {
		return err
	}
	var lo, size uint64
	ok := false
	if c.p.syms != nil {
		lo, size, ok = c.p.syms.FuncAt(addr)
	}
	if !ok {
		return c.fail(ErrNoFunction)
	}
	pr.fn, pr.val, pr.val2, pr.biased = FnFunc, lo, lo+size, true
	return nil
}

// funcAddr reads a .function operand: a number is an address, anything else is a
// function's name, looked up in the binary's symbols.
func (c *predScan) funcAddr() (uint64, error) {
	s := c.i
	if isDigit(c.cur()) {
		for isAlnum(c.cur()) {
			c.i++
		}
		if c.i-s >= 24 {
			return 0, c.fail(ErrOperandTooLong)
		}
		v, ok := eventdef.Kstrtoull(c.text(s, c.i))
		if !ok {
			return 0, c.fail(ErrInvalidValue)
		}
		return v, nil
	}
	for c.cur() != 0 && !isSpace(c.cur()) {
		c.i++
	}
	var addr uint64
	ok := false
	if c.p.syms != nil {
		addr, _, ok = c.p.syms.Func(c.text(s, c.i))
	}
	if !ok {
		return 0, c.fail(ErrNoFunction)
	}
	return addr, nil
}

// stringValue reads a quoted operand of a string field: == and != compare it whole,
// ~ matches it as the kernel's glob (one of its regex_type shapes).
func (c *predScan) stringValue(pr *pred, field *Field, op int) error {
	s := c.i
	q := c.cur()
	switch op {
	case opNE:
		pr.not = true
	case opGlob, opEQ:
	default:
		return c.fail(ErrIllegalFieldOp)
	}
	if !field.isString() {
		return c.fail(ErrExpectDigit)
	}
	for c.i++; c.cur() != 0; c.i++ {
		if c.cur() == q {
			break
		}
	}
	if c.cur() == 0 {
		return c.fail(ErrMissingQuote)
	}
	s++
	if c.i-s >= maxStrVal {
		return c.fail(ErrOperandTooLong)
	}
	pr.pattern = c.text(s, c.i)
	pr.fn = FnString
	if op == opGlob {
		pr.match, pr.pattern = parseRegex(pr.pattern, &pr.not)
	}
	c.i++
	return nil
}

// numberValue reads the operand of a numeric field, a number or a name from the
// field's enum table, and picks the comparison the runtime makes: cpu, an equality
// or an ordering of 1, 2, 4 or 8 bytes, or none (a size the kernel cannot compare).
func (c *predScan) numberValue(pr *pred, field *Field, op int) error {
	if field.isString() {
		return c.fail(ErrExpectString)
	}
	if op == opGlob {
		return c.fail(ErrIllegalFieldOp)
	}
	if field.Float {
		return &Error{Expr: c.p.s, Pos: c.pos + c.i, Code: ErrInvalidValue,
			Detail: "a floating-point field (" + field.Name + ") cannot be compared"}
	}
	var err error
	if !isDigit(c.cur()) && c.cur() != '-' {
		pr.val, err = c.enumName(field)
	} else {
		pr.val, err = c.number(field)
	}
	if err != nil {
		return err
	}
	if field.ft == ftCPU {
		pr.fn = FnCPU
		return nil
	}
	pr.fn, pr.size, pr.signed = FnNop, uint8(field.Size), field.Signed
	if field.Size == 1 || field.Size == 2 || field.Size == 4 || field.Size == 8 {
		pr.fn = FnCmp
		if op == opEQ || op == opNE {
			pr.fn = FnEq
		}
	}
	pr.not = op == opNE
	return nil
}

// enumName reads a name of the field's enum table and gives its value, sign-extended
// for a signed field since the table holds the element's bits.
func (c *predScan) enumName(field *Field) (uint64, error) {
	s := c.i
	for isAlnum(c.cur()) || c.cur() == '_' || c.cur() == ':' {
		c.i++
	}
	v, ok := enumValue(field.Enum, c.text(s, c.i))
	if !ok {
		return 0, &Error{Expr: c.p.s, Pos: c.pos + s, Code: ErrInvalidValue,
			Detail: "no value of " + field.Name + " is named " + c.text(s, c.i)}
	}
	if field.Signed {
		v = uint64(int64(v<<(64-8*field.Size)) >> (64 - 8*field.Size))
	}
	return v, nil
}

// number reads a decimal, octal or hex operand as the kernel's kstrtoll (a signed
// field) or kstrtoull does; past 23 characters it is refused as too long.
func (c *predScan) number(field *Field) (uint64, error) {
	s := c.i
	if c.cur() == '-' {
		c.i++
	}
	for isAlnum(c.cur()) {
		c.i++
	}
	if c.i-s >= 24 {
		return 0, c.fail(ErrOperandTooLong)
	}
	num := c.text(s, c.i)
	if field.Signed {
		v, ok := eventdef.Kstrtoll(num)
		if !ok {
			return 0, c.p.fail(ErrIllegalIntval, c.pos+s)
		}
		return uint64(v), nil
	}
	v, ok := eventdef.Kstrtoull(num)
	if !ok {
		return 0, c.p.fail(ErrIllegalIntval, c.pos+s)
	}
	return v, nil
}

// enumValue looks a name up in an enum table.
func enumValue(enum []eventdef.EnumValue, name string) (uint64, bool) {
	for _, e := range enum {
		if e.Name == name {
			return e.Value, true
		}
	}
	return 0, false
}

// parseRegex is filter_parse_regex for a ~ pattern: a leading '!' inverts, '*' at
// the start, the end or both makes a suffix, prefix or substring match, any other
// '*', '?', '[' or '\' a glob.
func parseRegex(buf string, not *bool) (uint8, string) {
	if strings.HasPrefix(buf, "!") {
		*not = true
		buf = buf[1:]
	} else {
		*not = false
	}
	if buf != "" && isDigit(buf[0]) {
		return MatchFull, buf
	}
	typ := uint8(MatchFull)
	for i := 0; i < len(buf); i++ {
		switch c := buf[i]; {
		case c == '*':
			switch {
			case i == 0:
				typ = MatchEnd
			case i == len(buf)-1:
				if typ == MatchEnd {
					typ = MatchMiddle
				} else {
					typ = MatchFront
				}
				buf = buf[:i]
				i = len(buf)
			default:
				return MatchGlob, buf
			}
		case c == '[' || c == '?' || c == '\\':
			return MatchGlob, buf
		}
	}
	if strings.HasPrefix(buf, "*") {
		buf = buf[1:]
	}
	return typ, buf
}

// EventError is a refused filter of GROUP/NAME as rewrite, kprewrite filter and the
// kernel's filter file report it: the message, then the filter with its caret.
func EventError(group, name string, err error) error {
	var fe *Error
	if errors.As(err, &fe) {
		return fmt.Errorf("filter of %s/%s: %s\n  %s", group, name, fe.Message(), strings.ReplaceAll(strings.TrimRight(fe.FilterFile(), "\n"), "\n", "\n  "))
	}
	return fmt.Errorf("filter of %s/%s: %w", group, name, err)
}
