package eventdef

import (
	"fmt"
	"strings"
)

// ErrorCode names one class of definition error. Its message is the text
// the kernel writes to tracefs error_log for the same mistake (the names
// follow the kernel's ERRORS list in kernel/trace/trace_probe.h); codes
// marked "kprewrite" have no kernel counterpart.
type ErrorCode int

// Error codes, in the kernel's order where they exist there.
const (
	ErrBadMaxactType ErrorCode = iota + 1
	ErrBadMaxact
	ErrMaxactTooBig
	ErrBadProbeAddr
	ErrNonUniqSymbol
	ErrBadRetprobe
	ErrBadAddrSuffix
	ErrNoGroupName
	ErrGroupTooLong
	ErrBadGroupName
	ErrNoEventName
	ErrEventTooLong
	ErrBadEventName
	ErrRetvalOnProbe
	ErrBadStackNum
	ErrBadArgNum
	ErrBadVar
	ErrBadRegName
	ErrBadMemAddr
	ErrBadImm
	ErrImmstrNoClose
	ErrFileOnKprobe
	ErrBadFileOffs
	ErrTooManyOps
	ErrDerefNeedBrace
	ErrBadDerefOffs
	ErrDerefOpenBrace
	ErrCommCantDeref
	ErrBadFetchArg
	ErrArrayNoClose
	ErrBadArraySuffix
	ErrBadArrayNum
	ErrArrayTooBig
	ErrBadType
	ErrBadString
	ErrBadSymstring
	ErrBadBitfield
	ErrArgNameTooLong
	ErrNoArgName
	ErrBadArgName
	ErrUsedArgName
	ErrArgTooLong
	ErrNoArgBody
	ErrDiffProbeType
	ErrDiffArgType
	ErrSameProbe
	ErrNosupBTFArg
	ErrNofentryArgs
	ErrNeedStringType
	ErrTooManyArgs
	// kprewrite-only codes.
	ErrBadCommand
	ErrNoProbePoint
	ErrFileSite
	ErrNoSuchEvent
	ErrNoSymbol
	ErrUnsupported
	ErrBadEnum
	ErrBadGoErr
)

var errorText = map[ErrorCode]string{
	ErrBadMaxactType:  "Maxactive is only for function exit",
	ErrBadMaxact:      "Invalid maxactive number",
	ErrMaxactTooBig:   "Maxactive is too big",
	ErrBadProbeAddr:   "Invalid probed address or symbol",
	ErrNonUniqSymbol:  "The symbol is not unique",
	ErrBadRetprobe:    "Retprobe address must be an function entry",
	ErrBadAddrSuffix:  "Invalid probed address suffix",
	ErrNoGroupName:    "Group name is not specified",
	ErrGroupTooLong:   "Group name is too long",
	ErrBadGroupName:   "Group name must follow the same rules as C identifiers",
	ErrNoEventName:    "Event name is not specified",
	ErrEventTooLong:   "Event name is too long",
	ErrBadEventName:   "Event name must follow the same rules as C identifiers",
	ErrRetvalOnProbe:  "$retval is not available on probe",
	ErrBadStackNum:    "Invalid stack number",
	ErrBadArgNum:      "Invalid argument number",
	ErrBadVar:         "Invalid $-variable specified",
	ErrBadRegName:     "Invalid register name",
	ErrBadMemAddr:     "Invalid memory address",
	ErrBadImm:         "Invalid immediate value",
	ErrImmstrNoClose:  "String is not closed with '\"'",
	ErrFileOnKprobe:   "File offset is not available with kprobe",
	ErrBadFileOffs:    "Invalid file offset value",
	ErrTooManyOps:     "Dereference is too much nested",
	ErrDerefNeedBrace: "Dereference needs a brace",
	ErrBadDerefOffs:   "Invalid dereference offset",
	ErrDerefOpenBrace: "Dereference brace is not closed",
	ErrCommCantDeref:  "$comm can not be dereferenced",
	ErrBadFetchArg:    "Invalid fetch argument",
	ErrArrayNoClose:   "Array is not closed",
	ErrBadArraySuffix: "Array has wrong suffix",
	ErrBadArrayNum:    "Invalid array size",
	ErrArrayTooBig:    "Array number is too big",
	ErrBadType:        "Unknown type is specified",
	ErrBadString:      "String accepts only memory argument",
	ErrBadSymstring:   "Symbol String doesn't accept data/userdata",
	ErrBadBitfield:    "Invalid bitfield",
	ErrArgNameTooLong: "Argument name is too long",
	ErrNoArgName:      "Argument name is not specified",
	ErrBadArgName:     "Argument name must follow the same rules as C identifiers",
	ErrUsedArgName:    "This argument name is already used",
	ErrArgTooLong:     "Argument expression is too long",
	ErrNoArgBody:      "No argument expression",
	ErrDiffProbeType:  "Probe type is different from existing probe",
	ErrDiffArgType:    "Argument type or name is different from existing probe",
	ErrSameProbe:      "There is already the exact same probe event",
	ErrNosupBTFArg:    "BTF is not available or not supported",
	ErrNofentryArgs:   "$arg* can be used only on function entry or exit",
	ErrNeedStringType: "$comm and immediate-string only accepts string type",
	ErrTooManyArgs:    "Too many arguments are specified",

	ErrBadCommand:   "Unknown probe type (use p, r or -)",
	ErrNoProbePoint: "Probe point is not specified",
	ErrFileSite:     "LIB:SITE needs a library and a symbol or file offset",
	ErrNoSuchEvent:  "No such event to delete",
	ErrNoSymbol:     "Symbol is not found",
	ErrUnsupported:  "This fetch argument is not supported by kprewrite",
	ErrBadEnum:      "Invalid enum table (TYPE{NAME=VALUE,...} on an integer type)",
	ErrBadGoErr:     "goerr takes TYPE,DATA and a table (TYPE,DATA:goerr{NAME=VALUE[/RECIPE],...})",
}

// Error returns the kernel's message text for the code.
func (c ErrorCode) Error() string {
	if s, ok := errorText[c]; ok {
		return s
	}
	return fmt.Sprintf("error %d", int(c))
}

// ParseError reports a bad definition the way error_log does: the
// command (its words joined by single spaces, as the kernel shows it),
// the 0-based byte position of the offending token in that command, and
// the message. errors.Is(err, ErrBadRegName) and the like work.
type ParseError struct {
	Def     string    // the definition as given
	Command string    // the definition's words joined by single spaces
	Pos     int       // 0-based position in Command of the caret
	Code    ErrorCode // what is wrong
	Line    int       // 1-based line, for ParseList; 0 otherwise
	Hint    string    // what was meant ("did you mean %di?"), after the message; not in Caret
}

func (e *ParseError) Error() string {
	msg := e.Code.Error()
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	if e.Line > 0 {
		return fmt.Sprintf("line %d: bad probe definition %q at position %d: %s", e.Line, e.Command, e.Pos, msg)
	}
	return fmt.Sprintf("bad probe definition %q at position %d: %s", e.Command, e.Pos, msg)
}

// Unwrap lets errors.Is match the ErrorCode.
func (e *ParseError) Unwrap() error { return e.Code }

// ErrAt returns the error code at the word-th word (0: the command, 1: the probe
// point, 2...: the arguments) of p's definition, plus offset bytes: the errors found
// after parsing (resolving the probe point in a binary, comparing with the other
// definitions of the same event) point where the kernel's would.
func (p *Probe) ErrAt(word, offset int, code ErrorCode) *ParseError {
	ps := &parser{def: p.Def, argv: splitArgs(p.Def)}
	ps.cmd = strings.Join(ps.argv, " ")
	return ps.errAt(word, offset, code)
}

// Caret renders the error like the kernel's error_log entry:
//
//	error: Invalid register name
//	  Command: p:grp/ev func %foo
//	                         ^
func (e *ParseError) Caret() string {
	return fmt.Sprintf("error: %s\n  Command: %s\n%s^\n", e.Code.Error(), e.Command, strings.Repeat(" ", 11+e.Pos))
}
