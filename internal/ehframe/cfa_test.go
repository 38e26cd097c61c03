package ehframe

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// dwarfRegs are the x86-64 DWARF register numbers readelf names in its CFA column.
var dwarfRegs = map[string]uint64{"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7,
	"r8": 8, "r9": 9, "r10": 10, "r11": 11, "r12": 12, "r13": 13, "r14": 14, "r15": 15}

// TestCFAAtMatchesReadelf runs CFAAt at every row readelf -wF prints (and one byte
// before the next row) and compares the CFA rule: the oracle for the call frame
// state machine that source-level probes rely on for DW_OP_fbreg.
func TestCFAAtMatchesReadelf(t *testing.T) {
	needTool(t, "readelf", "gcc", "g++")
	bins := []string{
		buildCached(t, "c-O2", "c", cSource, "gcc", "-O2"),
		buildCached(t, "c-O0", "c", cSource, "gcc", "-O0"),
		buildCached(t, "cxx-O2", "cc", cxxSource, "g++", "-O2"),
	}
	if p := "/usr/bin/python3.11"; fileExists(p) {
		bins = append(bins, p)
	}
	for _, bin := range bins {
		im := loadImage(t, bin)
		fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		byStart := map[uint64]FDE{}
		for _, f := range fdes {
			byStart[f.Start] = f
		}
		out, err := exec.Command("readelf", "-wF", bin).Output()
		if err != nil {
			t.Fatalf("readelf -wF %s: %v", bin, err)
		}
		var cur *FDE
		type row struct {
			loc  uint64
			rule string
		}
		var rows []row
		checked, exprs := 0, 0
		flush := func() {
			for i, r := range rows {
				pcs := []uint64{r.loc}
				if i+1 < len(rows) && rows[i+1].loc-1 > r.loc {
					pcs = append(pcs, rows[i+1].loc-1)
				} else if i+1 == len(rows) && cur.End-1 > r.loc {
					pcs = append(pcs, cur.End-1)
				}
				for _, pc := range pcs {
					got, err := CFAAt(im.eh, im.ehAddr, im.text, im.data, *cur, pc)
					if r.rule == "exp" {
						if err != ErrCFAExpression {
							t.Errorf("%s: pc %#x: CFA is an expression for readelf, CFAAt says %+v, %v", bin, pc, got, err)
						}
						exprs++
						continue
					}
					reg, off, ok := parseRule(r.rule)
					if !ok {
						continue
					}
					if err != nil || got.Reg != reg || got.Offset != off {
						t.Errorf("%s: pc %#x: readelf %s, CFAAt %+v, %v", bin, pc, r.rule, got, err)
					}
					checked++
				}
			}
			rows = rows[:0]
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			fields := strings.Fields(line)
			switch {
			case len(fields) >= 5 && fields[3] == "FDE":
				if cur != nil {
					flush()
				}
				cur = nil
				pcr := strings.TrimPrefix(fields[5], "pc=")
				start, err := strconv.ParseUint(strings.Split(pcr, "..")[0], 16, 64)
				if err == nil {
					if f, ok := byStart[start]; ok {
						cur = &f
					}
				}
			case cur != nil && len(fields) >= 2 && len(fields[0]) == 16:
				loc, err := strconv.ParseUint(fields[0], 16, 64)
				if err == nil {
					rows = append(rows, row{loc, fields[1]})
				}
			case len(fields) >= 4 && fields[3] == "CIE":
				if cur != nil {
					flush()
				}
				cur = nil
			}
		}
		if cur != nil {
			flush()
		}
		if checked < 20 {
			t.Errorf("%s: only %d CFA rows compared", bin, checked)
		}
		t.Logf("%s: %d CFA rules equal to readelf's, %d expressions", bin, checked, exprs)
	}
}

// parseRule reads readelf's "rsp+8" form.
func parseRule(s string) (uint64, int64, bool) {
	i := strings.IndexAny(s, "+-")
	if i < 0 {
		return 0, 0, false
	}
	reg, ok := dwarfRegs[s[:i]]
	if !ok {
		return 0, 0, false
	}
	off, err := strconv.ParseInt(s[i:], 10, 64)
	return reg, off, err == nil
}

func TestCFAAtOutsideFDE(t *testing.T) {
	needTool(t, "gcc")
	im := loadImage(t, buildCached(t, "c-O2", "c", cSource, "gcc", "-O2"))
	fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
	if err != nil || len(fdes) == 0 {
		t.Fatal(err)
	}
	if _, err := CFAAt(im.eh, im.ehAddr, im.text, im.data, fdes[0], fdes[0].End); err == nil {
		t.Error("CFAAt accepted a pc at the FDE's end")
	}
	if _, err := CFAAt(im.eh, im.ehAddr, im.text, im.data, FDE{Start: 0, End: 10}, 1); err == nil {
		t.Error("CFAAt accepted an FDE without instructions")
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestDebugFrame reads a .debug_frame section (gcc -g -O0 -fno-asynchronous-unwind-tables
// of tests/testdata/srcvars.c, dumped with objcopy): its FDEs, and at each function's
// entry and after its prologue the CFA rules readelf -wF gives (rsp+8, then rbp+16).
func TestDebugFrame(t *testing.T) {
	b, err := os.ReadFile("testdata/debug_frame.bin")
	if err != nil {
		t.Fatal(err)
	}
	fdes, err := ParseDebugFrame(b)
	if err != nil || len(fdes) < 6 {
		t.Fatalf("%d FDEs, %v", len(fdes), err)
	}
	if _, err := Parse(b, 0, 0, 0); err == nil {
		t.Error("the .debug_frame bytes parse as .eh_frame")
	}
	for _, f := range fdes {
		if !f.Debug {
			t.Errorf("FDE %+v not marked Debug", f)
		}
		entry, err := CFAAt(b, 0, 0, 0, f, f.Start)
		if err != nil || entry != (CFARule{Reg: 7, Offset: 8}) {
			t.Errorf("FDE [%#x,%#x) at entry: %+v %v, want rsp+8", f.Start, f.End, entry, err)
		}
		body, err := CFAAt(b, 0, 0, 0, f, f.Start+4) // after push %rbp; mov %rsp,%rbp
		if err != nil || body != (CFARule{Reg: 6, Offset: 16}) {
			t.Errorf("FDE [%#x,%#x) after the prologue: %+v %v, want rbp+16", f.Start, f.End, body, err)
		}
	}
}
