package eventdef

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// A Go error's message (the goerr type, kprewrite): TYPE,DATA:goerr{TABLE} reads an
// error interface's two words, its dynamic type's descriptor (TYPE, 0 for nil) and its
// data word (DATA), and builds the message where the dynamic type keeps it in memory
// as a string: the table names every dynamic type it knows (NAME=VALUE), and tells,
// for some, how their Error method builds the message from memory, without running
// it (NAME=VALUE/RECIPE):
//
//	/str/OFF          the Go string at DATA+OFF (*errors.errorString's s,
//	                  *fmt.wrapError's msg)
//	/path/OP/PATH     *fs.PathError: the strings at DATA+OP and DATA+PATH, then the
//	                  message of the error interface after PATH's string
//	                  ("open /x: no such file or directory")
//	/wrap/S/ERR       *os.SyscallError: the string at DATA+S, then the message of
//	                  the error interface at DATA+ERR ("open: no such file or
//	                  directory")
//	/errno/TAB/LEN    syscall.Errno: the number at DATA, its text from the string
//	                  array of LEN entries at TAB (syscall's errors), else
//	                  "errno N", as Errno.Error says
//
// In a position-independent program the table starts with @image: its addresses (the
// types' and syscall's table) are link-time ones, which the load bias moves.
//
// The record's slot is a data_loc; its bytes are the message (cut at the record's
// room) and its NUL, a flag byte (1: a message was read), and the dynamic type's
// word (8 bytes). A value whose message was not read (nil, a type without a recipe,
// a fault) prints as its type's name from the table, else the word in hex; one with
// a message prints it as a string. The type word is the link-time one (@image).

// GoErrKind says how a dynamic type's message is read.
type GoErrKind uint8

// Recipes of messages.
const (
	GoErrStr   GoErrKind = 1 // the Go string at DATA+A
	GoErrPath  GoErrKind = 2 // DATA+A " " DATA+B ": " the error at DATA+B+16
	GoErrErrno GoErrKind = 3 // the number at DATA, named by the table of B strings at A
	GoErrWrap  GoErrKind = 4 // DATA+A ": " the error at DATA+B
)

var goErrKinds = map[string]GoErrKind{"str": GoErrStr, "path": GoErrPath, "errno": GoErrErrno, "wrap": GoErrWrap}

// GoErrCase is a dynamic type whose message a goerr argument reads.
type GoErrCase struct {
	Type uint64 // the type descriptor's address (the interface's type word)
	Kind GoErrKind
	A, B uint64
}

// OpStGoErr (kprewrite): u8 flags, u16 n, n cases {u64 type, u8 kind, u64 a, u64 b},
// then a source and its dereferences that give the data word; the block's value is
// the type word.
const OpStGoErr = 0x28

// GoErrImage, in OpStGoErr's flags: the addresses are link-time ones (@image).
const GoErrImage = 1

// goErrImage is the table entry that marks link-time addresses.
const goErrImage = "@image"

// goErrCaseSize is the encoded size of a GoErrCase.
const goErrCaseSize = 25

// goErrTrailer is what follows a goerr's message: its NUL, the flag, the type word.
const goErrTrailer = 10

// goErrDepth bounds the errors a message nests (a PathError's Err).
const goErrDepth = 3

// parseGoErrTable parses goerr's table: the names and values (as an enum's) and the
// recipes. It returns the offset of the first error, else -1.
func parseGoErrTable(s string, ft *fetchType) ([]EnumValue, []GoErrCase, bool, int) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, nil, false, 0
	}
	var plain []string
	var cases []GoErrCase
	at := 1
	ents := strings.Split(s[1:len(s)-1], ",")
	image := ents[0] == goErrImage
	if image {
		ents, at = ents[1:], at+len(goErrImage)+1
	}
	for _, ent := range ents {
		name, val, _ := strings.Cut(ent, "=")
		v, recipe, has := strings.Cut(val, "/")
		nv := name + "=" + v
		plain = append(plain, nv)
		if has {
			typ, ok := kstrtoul(v, 0)
			c, ok2 := parseGoErrRecipe(recipe)
			if !ok || !ok2 || typ == 0 {
				return nil, nil, false, at + len(nv)
			}
			c.Type = typ
			cases = append(cases, c)
		}
		at += len(ent) + 1
	}
	enum, bad := parseEnumTable("{"+strings.Join(plain, ",")+"}", ft)
	if bad >= 0 {
		return nil, nil, false, 0
	}
	return enum, cases, image, -1
}

// parseGoErrRecipe parses KIND/A[/B].
func parseGoErrRecipe(s string) (GoErrCase, bool) {
	f := strings.Split(s, "/")
	k, ok := goErrKinds[f[0]]
	want := map[GoErrKind]int{GoErrStr: 2, GoErrPath: 3, GoErrErrno: 3, GoErrWrap: 3}[k]
	if !ok || len(f) != want {
		return GoErrCase{}, false
	}
	c := GoErrCase{Kind: k}
	for i, p := range f[1:] {
		v, ok := kstrtoul(p, 0)
		if !ok || v > 1<<47 {
			return GoErrCase{}, false
		}
		if i == 0 {
			c.A = v
		} else {
			c.B = v
		}
	}
	return c, true
}

// parseGoErr parses TYPE,DATA:goerr{TABLE}: TYPE into the argument's code, DATA
// into its lenCode.
func (ap *argParser) parseGoErr(arg *Arg, t argType, table string, tableOff, base int) *ParseError {
	typ, _, pair := strings.Cut(t.expr, ",")
	if t.count > 0 || !pair || table == "" {
		return ap.err(base+t.tOff, ErrBadGoErr)
	}
	ap.resetCode()
	if perr := ap.parseProbeArg(typ); perr != nil {
		return perr
	}
	switch ap.code[0].op {
	case opComm, opData, opXmm:
		return ap.err(base, ErrBadGoErr)
	}
	ap.pc++
	if ap.pc+1 >= fetchInsnMax || ap.code[ap.pc].op != opNop {
		return ap.err(ap.offset, ErrTooManyOps)
	}
	ap.code[ap.pc] = insn{op: opStGoErr}
	ap.code[ap.pc+1] = insn{op: opEnd}
	arg.code = append([]insn(nil), ap.code[:ap.pc+2]...)
	if perr := ap.parseLength(arg, t.expr, base); perr != nil {
		return perr
	}
	enum, cases, image, bad := parseGoErrTable(table, findFetchType("x64"))
	if bad >= 0 {
		return ap.err(base+tableOff+bad, ErrBadGoErr)
	}
	arg.Enum, arg.GoErr, arg.GoErrImage = enum, cases, image
	return nil
}

// goErrCode is the store of a goerr: its cases and the data word's fetch.
func (c *compiler) goErrCode(a *Arg) ([]byte, error) {
	if len(a.GoErr) > 0xffff {
		return nil, ErrUnsupported
	}
	le := binary.LittleEndian
	var flags byte
	if a.GoErrImage {
		flags = GoErrImage
		c.flags |= FlagLoadBias
	}
	out := le.AppendUint16([]byte{OpStGoErr, flags}, uint16(len(a.GoErr)))
	for _, k := range a.GoErr {
		out = le.AppendUint64(out, k.Type)
		out = append(out, byte(k.Kind))
		out = le.AppendUint64(le.AppendUint64(out, k.A), k.B)
	}
	lc, err := c.lengthCode(a)
	if err != nil {
		return nil, fmt.Errorf("data word: %w", err)
	}
	return append(out, lc...), nil
}

// goErr stores a goerr (OpStGoErr at code[0]); tw is the type word.
func (r *runner) goErr(code []byte, tw uint64, fault bool, slot func(int) ([]byte, bool)) bool {
	le := binary.LittleEndian
	if len(code) < 4 || code[1] > GoErrImage {
		return false
	}
	n := int(le.Uint16(code[2:]))
	if len(code) < 4+n*goErrCaseSize {
		return false
	}
	g := goErrRun{r: r, cases: decodeGoErrCases(code[4:], n)}
	if code[1] == GoErrImage {
		g.bias = r.m.LoadBias
	}
	data, dfault, rest, ok := r.source(code[4+n*goErrCaseSize:])
	s, sok := slot(4)
	if !ok || len(rest) != 0 || !sok {
		return false
	}
	if fault {
		tw = 0
	}
	tw = g.linked(tw)
	off := len(r.rec)
	avail := r.recmax - off
	if avail < goErrTrailer {
		le.PutUint32(s, uint32(off)&0xffff)
		return true
	}
	var msg []byte
	ok = !dfault && g.errMsg(tw, data, avail-goErrTrailer, &msg)
	if !ok {
		msg = msg[:0]
	}
	r.rec = append(append(r.rec, msg...), 0, b2u(ok))
	r.rec = le.AppendUint64(r.rec, tw)
	le.PutUint32(s, uint32(len(msg)+goErrTrailer)<<16|uint32(off)&0xffff)
	return true
}

func decodeGoErrCases(b []byte, n int) []GoErrCase {
	le := binary.LittleEndian
	out := make([]GoErrCase, n)
	for i := range out {
		e := b[i*goErrCaseSize:]
		out[i] = GoErrCase{Type: le.Uint64(e), Kind: GoErrKind(e[8]), A: le.Uint64(e[9:]), B: le.Uint64(e[17:])}
	}
	return out
}

// goErrRun is one goerr's message being built.
type goErrRun struct {
	r     *runner
	cases []GoErrCase
	bias  uint64 // the load bias (@image), else 0
}

// linked is the link-time type word of run-time word w (0 stays nil).
func (g *goErrRun) linked(w uint64) uint64 {
	if w == 0 {
		return 0
	}
	return w - g.bias
}

// errMsg appends the message of the error (tw, data) to *msg, at most max bytes in
// all; false when it cannot be read. A PathError's or a SyscallError's message ends
// with its Err's (a loop, as the C runtime's, whose stack must stay bounded).
func (g *goErrRun) errMsg(tw, data uint64, max int, msg *[]byte) bool {
	r := g.r
	for range goErrDepth {
		k := findGoErrCase(g.cases, tw)
		if k == nil {
			return false
		}
		switch k.Kind {
		case GoErrStr:
			return r.msgGoString(data+k.A, max, msg)
		case GoErrErrno:
			return r.msgErrno(k.A+g.bias, k.B, data, max, msg)
		case GoErrPath, GoErrWrap:
			s, e := k.A, k.B // the last string's and the inner error's offsets
			if k.Kind == GoErrPath {
				if !r.msgGoString(data+k.A, max, msg) || !msgLit(" ", max, msg) {
					return false
				}
				s, e = k.B, k.B+16
			}
			if !r.msgGoString(data+s, max, msg) || !msgLit(": ", max, msg) {
				return false
			}
			tab, ok1 := r.readU64(data + e)
			d2, ok2 := r.readU64(data + e + 8)
			if !ok1 || !ok2 || tab == 0 {
				return false
			}
			w, ok := r.readU64(tab + 8)
			if !ok {
				return false
			}
			tw, data = g.linked(w), d2
			continue
		}
		return false
	}
	return false
}

func findGoErrCase(cases []GoErrCase, tw uint64) *GoErrCase {
	for i := range cases {
		if cases[i].Type == tw && tw != 0 {
			return &cases[i]
		}
	}
	return nil
}

// msgErrno appends syscall.Errno's text, as Errno.Error gives it: its entry in
// syscall's table, else "errno N".
func (r *runner) msgErrno(tab, n, data uint64, max int, msg *[]byte) bool {
	v, ok := r.readU64(data)
	if !ok {
		return false
	}
	if int64(v) >= 0 && v < n {
		ln, ok := r.readU64(tab + 16*v + 8)
		if !ok {
			return false
		}
		if ln != 0 {
			return r.msgGoString(tab+16*v, max, msg)
		}
	}
	return msgLit("errno "+strconv.FormatInt(int64(v), 10), max, msg)
}

// msgGoString appends the Go string whose header is at hdr, cut at max.
func (r *runner) msgGoString(hdr uint64, max int, msg *[]byte) bool {
	ptr, ok1 := r.readU64(hdr)
	n, ok2 := r.readU64(hdr + 8)
	if !ok1 || !ok2 || int64(n) < 0 {
		return false
	}
	b := make([]byte, min(n, uint64(max-len(*msg))))
	if len(b) > 0 && !r.read(ptr, b) {
		return false
	}
	*msg = append(*msg, b...)
	return true
}

// msgLit appends s, cut at max.
func msgLit(s string, max int, msg *[]byte) bool {
	*msg = append(*msg, s[:min(len(s), max-len(*msg))]...)
	return true
}

// goErrText is how a goerr element prints: its message quoted, else its type's name
// or the type word in hex; ok false for a faulted one.
func goErrText(a *Arg, u uint64, rec []byte) (text string, msg, ok bool, err error) {
	l, o := int(u>>16), int(u&0xffff)
	if l == 0 {
		return "", false, false, nil
	}
	if l < goErrTrailer || o+l > len(rec) {
		return "", false, false, fmt.Errorf("error value at %d+%d outside the %d-byte record", o, l, len(rec))
	}
	b := rec[o : o+l]
	tw := binary.LittleEndian.Uint64(b[l-8:])
	if b[l-9] == 1 {
		return string(b[:l-goErrTrailer]), true, true, nil
	}
	if name, ok := a.EnumName(tw); ok {
		return name, false, true, nil
	}
	return hexStr(tw), false, true, nil
}
