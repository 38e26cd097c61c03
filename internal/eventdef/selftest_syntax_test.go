package eventdef

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// selftestCases are the definitions of the kernel's ftrace selftest
// tools/testing/selftests/ftrace/test.d/kprobe/kprobe_syntax_errors.tc, written as
// that file writes them: '^' marks where the kernel's error_log puts the caret, and
// the code is the one its comment names (the messages are trace_probe.h's). The
// probed symbol is vfs_read, as there: Parse does not look symbols up.
//
// Left out, and why:
//   - 'p ^non_exist_func' (BAD_PROBE_ADDR, enoent) and 'p ^vfs_read+3'
//     (BAD_INSN_BNDRY) need a binary to resolve the symbol against:
//     tests.TestKernelSyntaxErrorsOnBinary checks them end to end.
//   - the BTF cases of newer versions of the file ($arg*, 'p vfs_read ^hoge',
//     NO_BTFARG, BAD_VAR_ARGS, DOUBLE_ARGS, NO_RETVAL, NOSUP_BTFARG): kprewrite reads
//     a program's types from its DWARF, in source-level definitions
//     (internal/srcprobe), not from BTF; a bare name is a variable there.
var selftestCases = []struct {
	def  string // with '^' at the kernel's caret
	code ErrorCode
	msg  string // the kernel's message (trace_probe.h, ERRORS)
}{
	// "if grep -q 'r\[maxactive\]' README"
	{"p^100 vfs_read", ErrBadMaxactType, "Maxactive is only for function exit"},
	{"r^1a111 vfs_read", ErrBadMaxact, "Invalid maxactive number"},
	{"r^100000 vfs_read", ErrMaxactTooBig, "Maxactive is too big"},

	{"p ^hoge-fuga", ErrBadProbeAddr, "Invalid probed address or symbol"},
	{"p ^hoge+1000-1000", ErrBadProbeAddr, "Invalid probed address or symbol"},
	{"r ^vfs_read+10", ErrBadRetprobe, "Retprobe address must be an function entry"},
	{"p:^/bar vfs_read", ErrNoGroupName, "Group name is not specified"},
	{"p:^12345678901234567890123456789012345678901234567890123456789012345/bar vfs_read", ErrGroupTooLong, "Group name is too long"},

	{"p:^foo.1/bar vfs_read", ErrBadGroupName, "Group name must follow the same rules as C identifiers"},
	// Older versions of the file have 'p:foo/^ vfs_read' here: since Linux 6.1
	// (traceprobe_parse_event_name() "GROUP/" without an event) that generates the
	// event's name, as kprewrite does (TestSelftestSyntaxAccepted); an empty name
	// with no group is still NO_EVENT_NAME.
	{"p:^ vfs_read", ErrNoEventName, "Event name is not specified"},
	{"p:foo/^12345678901234567890123456789012345678901234567890123456789012345 vfs_read", ErrEventTooLong, "Event name is too long"},
	{"p:foo/^bar.1 vfs_read", ErrBadEventName, "Event name must follow the same rules as C identifiers"},

	// "if grep -q "place (kretprobe): .*%return.*" README"
	{"p vfs_read^%hoge", ErrBadAddrSuffix, "Invalid probed address suffix"},
	{"p ^vfs_read+10%return", ErrBadRetprobe, "Retprobe address must be an function entry"},

	{"p vfs_read ^$retval", ErrRetvalOnProbe, "$retval is not available on probe"},
	{"p vfs_read ^$stack10000", ErrBadStackNum, "Invalid stack number"},
	// "if grep -q '$arg<N>' README"
	{"p vfs_read ^$arg10000", ErrBadArgNum, "Invalid argument number"},

	{"p vfs_read ^$none_var", ErrBadVar, "Invalid $-variable specified"},

	{"p vfs_read ^%none_reg", ErrBadRegName, "Invalid register name"},
	{"p vfs_read ^@12345678abcde", ErrBadMemAddr, "Invalid memory address"},
	{"p vfs_read ^@+10", ErrFileOnKprobe, "File offset is not available with kprobe"},

	// "grep -q "imm-value" README", "grep -q "imm-string" README"
	{`p vfs_read arg1=\^x`, ErrBadImm, "Invalid immediate value"},
	{`p vfs_read arg1=\"abcd^`, ErrImmstrNoClose, "String is not closed with '\"'"},

	{"p vfs_read ^+0@0)", ErrDerefNeedBrace, "Dereference needs a brace"},
	{"p vfs_read ^+0ab1(@0)", ErrBadDerefOffs, "Invalid dereference offset"},
	{"p vfs_read +0(+0(@0^)", ErrDerefOpenBrace, "Dereference brace is not closed"},

	// "if grep -A1 "fetcharg:" README | grep -q '\$comm'"
	{"p vfs_read +0(^$comm)", ErrCommCantDeref, "$comm can not be dereferenced"},

	{"p vfs_read ^&1", ErrBadFetchArg, "Invalid fetch argument"},

	// "We've introduced this limitation with array support"
	{"p vfs_read +0(^+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(@0))))))))))))))", ErrTooManyOps, "Dereference is too much nested"},
	{"p vfs_read +0(@11):u8[10^", ErrArrayNoClose, "Array is not closed"},
	{"p vfs_read +0(@11):u8[10]^a", ErrBadArraySuffix, "Array has wrong suffix"},
	{"p vfs_read +0(@11):u8[^10a]", ErrBadArrayNum, "Invalid array size"},
	{"p vfs_read +0(@11):u8[^256]", ErrArrayTooBig, "Array number is too big"},

	{"p vfs_read @11:^unknown_type", ErrBadType, "Unknown type is specified"},
	{"p vfs_read $stack0:^string", ErrBadString, "String accepts only memory argument"},
	{"p vfs_read @11:^b10@a/16", ErrBadBitfield, "Invalid bitfield"},

	{"p vfs_read ^arg123456789012345678901234567890=@11", ErrArgNameTooLong, "Argument name is too long"},
	{"p vfs_read ^=@11", ErrNoArgName, "Argument name is not specified"},
	{"p vfs_read ^var.1=@11", ErrBadArgName, "Argument name must follow the same rules as C identifiers"},
	{"p vfs_read var1=@11 ^var1=@12", ErrUsedArgName, "This argument name is already used"},
	{"p vfs_read ^+1234567(+1234567(+1234567(+1234567(+1234567(+1234567(@1234))))))", ErrArgTooLong, "Argument expression is too long"},
	{"p vfs_read arg1=^", ErrNoArgBody, "No argument expression"},
}

// TestSelftestSyntaxErrors: every case of kprobe_syntax_errors.tc that applies to a
// user-space probe gets the kernel's message at the kernel's caret.
func TestSelftestSyntaxErrors(t *testing.T) {
	for _, c := range selftestCases {
		pos := strings.IndexByte(c.def, '^')
		def := c.def[:pos] + c.def[pos+1:]
		_, err := Parse(def)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) = %v, want %q at %d", def, err, c.code.Error(), pos)
			continue
		}
		if pe.Code != c.code || pe.Pos != pos || !errors.Is(err, c.code) {
			t.Errorf("Parse(%q): %q at %d, want %q at %d\n%s", def, pe.Code.Error(), pe.Pos, c.code.Error(), pos, pe.Caret())
		}
		if !strings.Contains(err.Error(), ": "+c.msg) || !strings.HasPrefix(pe.Caret(), "error: "+c.msg+"\n") {
			t.Errorf("Parse(%q): %v, want the kernel's message %q", def, err, c.msg)
		}
	}
}

// TestSelftestSyntaxAccepted: what newer kernels accept of the older file's errors.
func TestSelftestSyntaxAccepted(t *testing.T) {
	// 'p:foo/^ vfs_read' was NO_EVENT_NAME; "GROUP/" now generates the name
	p, err := Parse("p:foo/ vfs_read")
	if err != nil || p.Group != "foo" || p.Event != "p_vfs_read_0" {
		t.Errorf("p:foo/ vfs_read: %v %+v", err, p)
	}
}

// TestSelftestMultiprobe replays kprobe_multiprobe.tc: an event of two probes, removed
// by its name (both go) and, defined again, one probe removed by "-:EVENT SYM".
func TestSelftestMultiprobe(t *testing.T) {
	const def1, def2 = "p:kprobes/testevent _do_fork", "p:kprobes/testevent do_exit"
	var s Set
	for _, d := range []string{def1, def2} {
		if _, _, err := s.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, removed, err := s.Add("-:kprobes/testevent"); err != nil || len(removed) != 2 || len(s.Probes) != 0 {
		t.Fatalf("remove the event by name: %v, %d removed, %d left", err, len(removed), len(s.Probes))
	}
	for _, d := range []string{def1, def2} {
		if _, _, err := s.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	_, removed, err := s.Add("-:kprobes/testevent _do_fork")
	if err != nil || len(removed) != 1 || removed[0].Symbol != "_do_fork" || len(s.Probes) != 1 || s.Probes[0].Symbol != "do_exit" {
		t.Fatalf("remove one probe: %v, removed %v, left %v", err, removed, s.Probes)
	}
	// appending a different type must fail
	if _, _, err := s.Add(def1 + " $stack"); !errors.Is(err, ErrDiffArgType) {
		t.Errorf("appending another type: %v", err)
	}
	// the last probe takes the event with it: the name is free for any kind again
	if _, removed, err := s.Add("-:kprobes/testevent do_exit"); err != nil || len(removed) != 1 || len(s.Probes) != 0 {
		t.Fatalf("remove the last probe: %v %v", err, s.Probes)
	}
	if _, _, err := s.Add("r:kprobes/testevent do_exit"); err != nil {
		t.Errorf("the event outlived its last probe: %v", err)
	}
}

// TestDeleteMatch: what a deletion's words match, as trace_kprobe_match() compares them.
func TestDeleteMatch(t *testing.T) {
	defs := []string{
		"p:g/ev f1 a=%di b=%si:u32",
		"p:g/ev f2+16 a=%di b=%dx:u32",
		"p:g/ev 0x401000 a=%ax b=%si:u32",
		"p:g/ev libc.so.6:malloc a=%di b=%si:u32",
		"p:g/ev2 f1",
		"p:h/ev f1 a=%di b=%si:u32",
		"p:h/other f3",
	}
	for _, c := range []struct {
		del  string
		want []string // the definitions removed, or nil for ErrNoSuchEvent
	}{
		{"-:g/ev", defs[:4]},
		{"-:g/ev f1", defs[:1]},
		{"-:g/ev f1+0", nil}, // the kernel writes an offset 0 as SYM
		{"-:g/ev f2+16", defs[1:2]},
		{"-:g/ev f2+0x10", nil}, // and an offset in decimal
		{"-:g/ev 0x401000", defs[2:3]},
		{"-:g/ev libc.so.6:malloc", defs[3:4]},
		{"-:g/ev f1 a=%di", defs[:1]},
		{"-:g/ev f1 a=%di b=%si:u32", defs[:1]},
		{"-:g/ev f1 a=%di b=%si", nil},
		{"-:g/ev f1 a=%di b=%si:u32 c=%dx", nil}, // more arguments than the probe has
		{"-:g/ev f2 a=%di", nil},
		{"-:ev", []string{defs[0], defs[1], defs[2], defs[3], defs[5]}}, // any group
		{"-:ev f1", []string{defs[0], defs[5]}},
		{"-:g/", defs[:5]}, // every event of the group
		{"-:h/ f3", defs[6:]},
		{"-:g/nothere", nil},
		{"-:nothere", nil},
		{"-:g/ev nothere", nil},
	} {
		var s Set
		for _, d := range defs {
			if _, _, err := s.Add(d); err != nil {
				t.Fatal(err)
			}
		}
		_, removed, err := s.Add(c.del)
		if c.want == nil {
			if !errors.Is(err, ErrNoSuchEvent) || len(s.Probes) != len(defs) {
				t.Errorf("%q: %v, %d probes left; want %q and all left", c.del, err, len(s.Probes), ErrNoSuchEvent.Error())
			}
			continue
		}
		var got []string
		for _, p := range removed {
			got = append(got, p.Def)
		}
		if err != nil || !slices.Equal(got, c.want) || len(s.Probes) != len(defs)-len(c.want) {
			t.Errorf("%q: %v, removed %q, want %q", c.del, err, got, c.want)
		}
		// the index of events agrees with what is left
		n := 0
		for k, ps := range s.byEvent {
			n += len(ps)
			for _, p := range ps {
				if [2]string{p.Group, p.Event} != k || !slices.Contains(s.Probes, p) {
					t.Errorf("%q: %s indexed under %v", c.del, p.Def, k)
				}
			}
		}
		if n != len(s.Probes) {
			t.Errorf("%q: %d probes indexed, %d left", c.del, n, len(s.Probes))
		}
	}
}
