package evfilter

import (
	"debug/elf"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
)

const tracefs = "/sys/kernel/tracing"

// needOracle skips the test unless the kernel's uprobe tracer is usable.
func needOracle(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the uprobe tracer oracle needs root")
	}
	if _, err := os.Stat(tracefs + "/uprobe_events"); err != nil {
		t.Skip("tracefs with uprobe_events is not mounted at " + tracefs)
	}
}

func appendUprobe(line string) error {
	f, err := os.OpenFile(tracefs+"/uprobe_events", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(line + "\n"))
	return errors.Join(werr, f.Close())
}

// oracleDefs are the events the parser is compared on: every field kind.
var oracleDefs = []string{
	`p:kpwflt/e1 BIN:OFF a=%di:s32 b=%si:u64 s=+0(%di):string c=%ax:x8 ch=%si:char w=%dx:s16 u=%cx:u16 by=%r8:s8 arr=+0(%sp):u32[2] bf=%di:b3@2/32 sa=+0(%sp):string[2] cm=$comm x=%di`,
	`r:kpwflt/r1 BIN:OFF rv=$retval:s64 r32=$retval:u32`,
}

// oracleExprs are hand-written filters: each of the kernel's errors, each operator
// on each field kind, quoting, precedence and the parser's odd corners.
var oracleExprs = []string{
	"a == 1", "a ==", "a == 1 &&", "x == 1", "zz == 1", "a ~ \"x\"", "s == 1", "s ~ \"ab*\"", "a == \"x\"",
	"(a == 1", "a == 1)", "a == 1 & b == 2", "a = 1", "a == abc", "a == 99999999999999999999",
	"common_pid == 3 || comm ~ \"py*\" || cpu == 1 || CPU < 3 || common_cpu > 1", "common_comm == \"x\"",
	"c & 3", "ch == 65", "!(a == 1)", `s == "a\"b"`, "s == 'x'", "a == -1", "b == -1", "a > 0x10",
	"__probe_ip == 1", "__probe_func == 1", "a.ustring == 1", "a == 1 b == 2", "cpu & CPUS{1}",
	"arr == 1", "arr[0] == 1", "bf == 3", "sa ~ \"x\"", "sa == 1", "x < 0xffff", "x == 0x10000", "cm ~ \"ft\"",
	"x >= -1", "bf == 1 && (c == 2 || !c == 3)", "a == 1 || || b == 2", "&& a == 1", "() a == 1", "x == 1 ||",
	"x", "x ==", "1 == x", "x ~ 1", "cm ~ 1", "cm != \"a*\"", "cm < \"a\"", "x == 000000000000000000000000000001",
	"x == 1a", "x==1&&x==2", "x == 1 && ( x == 2", "((x == 1)) && )", "x == 1 &&& x == 2", "x == 0x", "x == 08",
	"x == 1)||(x==2", "", "   ", "!", "!!a == 1", "!(!(a == 1) || !b == 2) && s ~ \"*x*\"", "a != -2147483648",
	"a == 2147483648", "w < -32768", "u > 65535", "by >= 127 || by <= -128", "comm == \"x\" && COMM != \"y\"",
	"comm == 1", "comm ~ \"[a-z]*\"", "s ~ \"!abc\"", "s ~ \"a?c\"", "s ~ \"\\\\x\"", "s == \"\"", "s ~ \"\"",
	"a & 1 && a & 2 || a & 4", "a <= 1 || a >= 2 && a < 3 || a > 4", "(a == 1 || (b == 2 && (c == 3 || (ch == 4))))",
	"a == 1 || (b == 2", "a == '1'", "s == \"x", "s == 'x\"", "\"x\" == s", "a.function == main", "a.function == 0x10",
	"x.function == main", "x.function < 1", "x.function == 0x1", "a ==1", "a==-0", "a == -", "a == 0x8000000000000000",
	"b == 18446744073709551615", "b == 18446744073709551616", "b == 0777", "b == 0x1f", "cpu == -1", "cpu & 1",
	"common_type == 5", "common_flags == 0", "common_preempt_count != 0", "a.ustringx == 1", "a .ustring == 1",
	"a\t==\t1", "a == 1\t&&\tb == 2", "(((((a == 1)))))", ")(", "a == 1 | b == 2", "a == 1 |", "a == 1 &",
	"!=", "a ~ 1", "a !~ 1", "a == \"\"", "cm ~ \"*\"", "cm ~ \"**\"", "cm ~ \"*a*b\"", "cm ~ \"[\"", "__probe_ip > 0",
	"rv == -1", "r32 > 4000000000", "__probe_ret_ip != 0 && __probe_func != 0",
}

// TestParseMatchesKernel writes every filter into the kernel's filter file of the same
// event and requires the same verdict, and for a refusal the same filter file text
// (expression, caret, message).
func TestParseMatchesKernel(t *testing.T) {
	needOracle(t)
	bin := "/bin/true"
	off := textOffset(t, bin)
	defer removeEvents()
	removeEvents()
	exprs := append([]string(nil), oracleExprs...)
	exprs = append(exprs, randomExprs(rand.New(rand.NewSource(1)), 3000)...)
	compared := 0
	for _, def := range oracleDefs {
		def = strings.ReplaceAll(def, "BIN:OFF", fmt.Sprintf("%s:0x%x", bin, off))
		p, err := eventdef.Parse(def)
		if err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		if err := appendUprobe(def); err != nil {
			t.Fatalf("kernel refused %s: %v", def, err)
		}
		fields := Fields(p)
		filterFile := fmt.Sprintf("%s/events/%s/%s/filter", tracefs, p.Group, p.Event)
		for _, e := range exprs {
			if p.Return && !strings.Contains(e, "rv") && !strings.Contains(e, "probe") && !strings.HasPrefix(e, "c") {
				continue // the return probe's own fields; the others were compared on e1
			}
			kerr := os.WriteFile(filterFile, []byte(e), 0)
			kfile, err := os.ReadFile(filterFile)
			if err != nil {
				t.Fatal(err)
			}
			_, ours := Parse(e, fields, fSyms{})
			compared++
			if strings.Contains(e, ".function") || strings.Contains(e, "CPUS") {
				// kernel symbols and this machine's CPUs: ours resolve in the program
				continue
			}
			switch {
			case kerr == nil && ours != nil && trailingConnective(ours, e):
				t.Logf("%s: %q: this kernel takes a trailing && or || (newer ones, 6.18 here, refuse it, as ours does)", p.Event, e)
			case kerr == nil && ours != nil:
				t.Errorf("%s: %q: kernel accepts, ours: %v", p.Event, e, ours)
			case kerr != nil && ours == nil:
				t.Errorf("%s: %q: kernel refuses:\n%s\nours accepts", p.Event, e, kfile)
			case kerr != nil:
				var pe *Error
				if !errors.As(ours, &pe) {
					t.Errorf("%s: %q: not an *Error: %v", p.Event, e, ours)
				} else if got := pe.FilterFile(); strings.TrimRight(got, "\n") != strings.TrimRight(string(kfile), "\n") {
					t.Errorf("%s: %q:\nkernel:\n%s\nours:\n%s", p.Event, e, kfile, got)
				}
			}
		}
		os.WriteFile(filterFile, []byte("0"), 0)
	}
	t.Logf("%d filters compared with the kernel's", compared)
}

// trailingConnective says whether err is the refusal of a filter that ends in && or ||,
// which older kernels took as if it were not there (6.18 refuses it).
func trailingConnective(err error, expr string) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Code == ErrInvalidFilter && pe.Pos == len(strings.TrimRight(expr, " \t\n"))
}

// randomExprs makes filters from the grammar's tokens, well and badly formed.
func randomExprs(r *rand.Rand, n int) []string {
	fields := []string{"a", "b", "s", "c", "ch", "w", "u", "by", "arr", "bf", "sa", "cm", "x", "cpu", "comm", "common_pid", "zz", "__probe_ip"}
	ops := []string{"==", "!=", "<", "<=", ">", ">=", "&", "~", "=", "!~", "<>"}
	vals := []string{"0", "1", "-1", "0x10", "077", "08", "1a", "\"x\"", "'y*'", "\"*z\"", "\"a?\"", "\"[ab]*\"", "\"\"", "abc", "-", "\"open", "18446744073709551615", "-9223372036854775808"}
	var pred func(depth int) string
	pred = func(depth int) string {
		switch k := r.Intn(10); {
		case k == 0 && depth < 3:
			return "(" + pred(depth+1) + ")"
		case k == 1 && depth < 3:
			return "!" + pred(depth+1)
		case k < 4 && depth < 3:
			join := []string{" && ", " || ", "&&", "||", " & ", " | ", " "}[r.Intn(7)]
			return pred(depth+1) + join + pred(depth+1)
		}
		sp := []string{"", " ", "  "}
		return fields[r.Intn(len(fields))] + sp[r.Intn(3)] + ops[r.Intn(len(ops))] + sp[r.Intn(3)] + vals[r.Intn(len(vals))]
	}
	out := make([]string, n)
	for i := range out {
		out[i] = pred(0)
		if r.Intn(20) == 0 { // an unbalanced parenthesis
			out[i] = []string{"(", ")"}[r.Intn(2)] + out[i]
		}
	}
	return out
}

// textOffset is the file offset of the binary's entry point: any instruction does, the
// events are never enabled.
func textOffset(t *testing.T, path string) uint64 {
	f, err := elf.Open(path)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && f.Entry >= p.Vaddr && f.Entry < p.Vaddr+p.Filesz {
			return f.Entry - p.Vaddr + p.Off
		}
	}
	t.Skip("no entry point in " + path)
	return 0
}

func removeEvents() {
	for _, ev := range []string{"kpwflt/e1", "kpwflt/r1"} {
		appendUprobe("-:" + ev)
	}
}
