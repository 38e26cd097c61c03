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
	if e.Code == ErrNone && e.Detail == "" {
		return -1
	}
	return min(e.Pos, len(e.Expr))
}

// FilterFile is what the kernel's filter file shows after the filter was refused:
// the expression, a caret, the message.
func (e *Error) FilterFile() string {
	if c := e.Column(); c >= 0 {
		return fmt.Sprintf("%s\n%s^\n%s\n", e.Expr, strings.Repeat(" ", c), e.Error())
	}
	return fmt.Sprintf("%s\n%s\n", e.Expr, e.Error())
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
	prog := make([]struct {
		target int
		when   int
		pred   int
	}, npreds)
	inverts := make([]int, npreds)
	stack := []int{0}
	invert := 0
	n := 0
	update := func(at, inv int) error {
		t := prog[at].target
		if t < 0 || t >= len(prog) {
			return &Error{Expr: p.s}
		}
		s := prog[t].target
		prog[t].when = inv
		prog[t].target = at
		prog[at].target = s
		return nil
	}
	ptr := 0
outer:
	for p.at(ptr) != 0 {
		next := ptr
		ptr++
		c := p.at(next)
		if isSpace(c) {
			continue
		}
		switch c {
		case '(':
			if len(stack)-1 > nparens {
				return &Error{Expr: p.s}
			}
			stack = append(stack, invert)
			continue
		case '!':
			if p.at(next+1) != '=' && p.at(next+1) != '~' {
				invert ^= 1
				continue
			}
		}
		if n >= npreds {
			return p.fail(ErrTooManyPreds, next)
		}
		inverts[n] = invert
		prog[n].target = n - 1
		length, pr, err := p.parsePred(next, ptr)
		if err != nil {
			return err
		}
		prog[n].pred = len(f.preds)
		f.preds = append(f.preds, pr)
		ptr = next + length
		n++
		for {
			next = ptr
			ptr++
			c = p.at(next)
			if isSpace(c) {
				continue
			}
			switch c {
			case ')', 0:
			case '&', '|':
				if p.at(next+1) != c {
					return p.fail(ErrTooManyPreds, next)
				}
				ptr++
			default:
				return p.fail(ErrTooManyPreds, next)
			}
			top := &stack[len(stack)-1]
			invert = *top & flInvert
			if *top&flProcessAnd != 0 {
				if err := update(n-1, invert); err != nil {
					return err
				}
				*top &^= flProcessAnd
			}
			if c == '&' {
				*top |= flProcessAnd
				break
			}
			if *top&flProcessOr != 0 {
				if err := update(n-1, invert^1); err != nil {
					return err
				}
				*top &^= flProcessOr
			}
			if c == '|' {
				*top |= flProcessOr
				break
			}
			if c == 0 {
				break outer
			}
			if len(stack) == 1 {
				return p.fail(ErrTooManyClose, ptr)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 1 {
		return p.fail(ErrTooManyOpen, ptr)
	}
	if n == 0 {
		return p.fail(ErrNoFilter, ptr)
	}
	prog[n].target = 1 // TRUE
	prog[n+1].target = 0
	prog[n-1].target = n
	prog[n-1].when = 0
	for i := n - 1; i > 0; {
		i--
		t := prog[i].target
		if t < 0 || t >= len(prog) {
			return &Error{Expr: p.s}
		}
		if prog[i].when == prog[t].when {
			prog[i].target = prog[t].target
		}
	}
	f.prog = make([]entry, n)
	for i := 0; i < n; i++ {
		when := inverts[i] ^ prog[i].when
		if prog[i].target <= i {
			return &Error{Expr: p.s}
		}
		// the kernel's loop adds one after taking a branch
		f.prog[i] = entry{pred: prog[i].pred, when: when != 0, target: prog[i].target + 1}
	}
	return nil
}

// parsePred is parse_pred for the predicate at str[start:]; pos is the kernel's pos
// argument (start+1). It returns the bytes it used.
func (p *parser) parsePred(start, pos int) (int, pred, error) {
	var pr pred
	at := func(i int) byte { return p.at(start + i) }
	i := 0
	for isSpace(at(i)) {
		i++
	}
	s := i
	for isAlnum(at(i)) || at(i) == '_' {
		i++
	}
	if i == s {
		return 0, pr, &Error{Expr: p.s}
	}
	field := findField(p.fields, p.s[start+s:start+i])
	if field == nil {
		return 0, pr, p.fail(ErrFieldNotFound, pos+i)
	}
	rest := p.s[start+i:]
	if strings.HasPrefix(rest, ".ustring") {
		i += len(".ustring")
		rest = p.s[start+i:]
	}
	function := false
	if strings.HasPrefix(rest, ".function") {
		function = true
		i += len(".function")
	}
	for isSpace(at(i)) {
		i++
	}
	op := -1
	for k, o := range ops {
		if strings.HasPrefix(p.s[start+i:], o) {
			op = k
			break
		}
	}
	if op < 0 {
		return 0, pr, p.fail(ErrInvalidOp, pos+i)
	}
	i += len(ops[op])
	for isSpace(at(i)) {
		i++
	}
	s = i
	pr.src, pr.off, pr.op, pr.size = field.Src, field.Off, uint8(op), uint8(min(field.Size, 255))

	switch {
	case function:
		if field.Size != 8 {
			return 0, pr, p.fail(ErrIllegalFieldOp, pos+i)
		}
		if op != opEQ && op != opNE {
			return 0, pr, p.fail(ErrInvalidOp, pos+i)
		}
		var addr uint64
		if isDigit(at(i)) {
			for isAlnum(at(i)) {
				i++
			}
			if i-s >= 24 {
				return 0, pr, p.fail(ErrOperandTooLong, pos+i)
			}
			v, ok := eventdef.Kstrtoull(p.s[start+s : start+i])
			if !ok {
				return 0, pr, p.fail(ErrInvalidValue, pos+i)
			}
			addr = v
		} else {
			for at(i) != 0 && !isSpace(at(i)) {
				i++
			}
			var ok bool
			if p.syms != nil {
				addr, _, ok = p.syms.Func(p.s[start+s : start+i])
			}
			if !ok {
				return 0, pr, p.fail(ErrNoFunction, pos+i)
			}
		}
		var lo, size uint64
		ok := false
		if p.syms != nil {
			lo, size, ok = p.syms.FuncAt(addr)
		}
		if !ok {
			return 0, pr, p.fail(ErrNoFunction, pos+i)
		}
		pr.fn, pr.val, pr.val2, pr.biased = FnFunc, lo, lo+size, true

	case strings.HasPrefix(p.s[start+i:], "CPUS"):
		// a cpumask is checked against the CPUs of the machine that writes it; the
		// machine that runs the program may have others
		return 0, pr, &Error{Expr: p.s, Pos: pos + i, Code: ErrInvalidValue,
			Detail: "CPUS{} masks are not supported; compare cpu with numbers"}

	case at(i) == '\'' || at(i) == '"':
		q := at(i)
		switch op {
		case opNE:
			pr.not = true
		case opGlob, opEQ:
		default:
			return 0, pr, p.fail(ErrIllegalFieldOp, pos+i)
		}
		if !field.isString() {
			return 0, pr, p.fail(ErrExpectDigit, pos+i)
		}
		for i++; at(i) != 0; i++ {
			if at(i) == q {
				break
			}
		}
		if at(i) == 0 {
			return 0, pr, p.fail(ErrMissingQuote, pos+i)
		}
		s++
		if i-s >= maxStrVal {
			return 0, pr, p.fail(ErrOperandTooLong, pos+i)
		}
		pr.pattern = p.s[start+s : start+i]
		pr.fn = FnString
		if op == opGlob {
			pr.match, pr.pattern = parseRegex(pr.pattern, &pr.not)
		}
		i++

	case isDigit(at(i)) || at(i) == '-' || len(field.Enum) > 0 && (isAlnum(at(i)) || at(i) == '_'):
		if field.isString() {
			return 0, pr, p.fail(ErrExpectString, pos+i)
		}
		if op == opGlob {
			return 0, pr, p.fail(ErrIllegalFieldOp, pos+i)
		}
		if field.Float {
			return 0, pr, &Error{Expr: p.s, Pos: pos + i, Code: ErrInvalidValue,
				Detail: "a floating-point field (" + field.Name + ") cannot be compared"}
		}
		if !isDigit(at(i)) && at(i) != '-' { // a name of the field's enum table
			for isAlnum(at(i)) || at(i) == '_' || at(i) == ':' {
				i++
			}
			v, ok := enumValue(field.Enum, p.s[start+s:start+i])
			if !ok {
				return 0, pr, &Error{Expr: p.s, Pos: pos + s, Code: ErrInvalidValue,
					Detail: "no value of " + field.Name + " is named " + p.s[start+s:start+i]}
			}
			pr.val = v
			if field.Signed { // the table holds the element's bits: compare sign-extended
				pr.val = uint64(int64(v<<(64-8*field.Size)) >> (64 - 8*field.Size))
			}
		} else {
			if at(i) == '-' {
				i++
			}
			for isAlnum(at(i)) {
				i++
			}
			if i-s >= 24 {
				return 0, pr, p.fail(ErrOperandTooLong, pos+i)
			}
			num := p.s[start+s : start+i]
			if field.Signed {
				v, ok := eventdef.Kstrtoll(num)
				if !ok {
					return 0, pr, p.fail(ErrIllegalIntval, pos+s)
				}
				pr.val = uint64(v)
			} else {
				v, ok := eventdef.Kstrtoull(num)
				if !ok {
					return 0, pr, p.fail(ErrIllegalIntval, pos+s)
				}
				pr.val = v
			}
		}
		if field.ft == ftCPU {
			pr.fn = FnCPU
		} else {
			pr.fn, pr.size, pr.signed = FnNop, uint8(field.Size), field.Signed
			if field.Size == 1 || field.Size == 2 || field.Size == 4 || field.Size == 8 {
				pr.fn = FnCmp
				if op == opEQ || op == opNE {
					pr.fn = FnEq
				}
			}
			pr.not = op == opNE
		}

	default:
		return 0, pr, p.fail(ErrInvalidValue, pos+i)
	}
	return i, pr, nil
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
