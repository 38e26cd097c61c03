package ehframe

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// handLSDA is a program whose LSDAs are written by hand, so every expected
// call site is a symbol: f1 (LSDA pcrel|sdata4, LPStart omitted, uleb128 call
// sites, a region without landing pad), f2 (LSDA udata4, LPStart absptr, a
// type table, udata4 call sites), f3 (LSDA absptr, LPStart pcrel|sdata4,
// udata2 call sites), f4 (indirect LSDA through a data slot).
const handLSDA = `
	.text
	.globl _start
_start:
	.cfi_startproc
	call f1
	mov $60, %eax
	xor %edi, %edi
	syscall
	.cfi_endproc
	.type f1, @function
f1:
	.cfi_startproc
	.cfi_lsda 0x1b, lsda1
	push %rbp
	.cfi_def_cfa_offset 16
f1_cs1:
	call g
f1_cs1_end:
	nop
f1_cs2:
	call g
	call g
f1_cs2_end:
	nop
f1_cs3:
	call g
f1_cs3_end:
	pop %rbp
	.cfi_def_cfa_offset 8
	ret
f1_lp1:
	nop
f1_lp2:
	ret
	.cfi_endproc
	.size f1, .-f1

	.type f2, @function
f2:
	.cfi_startproc
	.cfi_lsda 0x03, lsda2
	sub $8, %rsp
	.cfi_def_cfa_offset 16
f2_cs1:
	call g
	nop
f2_cs1_end:
	add $8, %rsp
	.cfi_def_cfa_offset 8
	ret
f2_lpbase:
	int3
f2_lp1:
	ret
	.cfi_endproc

	.type f3, @function
f3:
	.cfi_startproc
	.cfi_lsda 0x00, lsda3
	sub $8, %rsp
	.cfi_def_cfa_offset 16
f3_cs1:
	call g
f3_cs1_end:
	add $8, %rsp
	.cfi_def_cfa_offset 8
	ret
f3_lp1:
	ret
	.cfi_endproc

	.type f4, @function
f4:
	.cfi_startproc
	.cfi_lsda 0x9b, slot4
	call g
	ret
	.cfi_endproc

g:	.cfi_startproc
	ret
	.cfi_endproc

	.section .gcc_except_table,"a",@progbits
	.align 4
# f1: LPStart omitted, no type table, uleb128 call sites.
lsda1:
	.byte 0xff
	.byte 0xff
	.byte 0x01
	.uleb128 lsda1_actions-.LLSDACSB1
.LLSDACSB1:
	.uleb128 f1_cs1-f1
	.uleb128 f1_cs1_end-f1_cs1
	.uleb128 f1_lp1-f1
	.uleb128 0
	.uleb128 f1_cs2-f1
	.uleb128 f1_cs2_end-f1_cs2
	.uleb128 f1_lp2-f1
	.uleb128 1
	.uleb128 f1_cs3-f1
	.uleb128 f1_cs3_end-f1_cs3
	.uleb128 0
	.uleb128 0
lsda1_actions:
	.byte 1, 0
	.align 4
# f2: LPStart absptr, type table (pcrel|sdata4 entries), udata4 call sites.
lsda2:
	.byte 0x00
	.quad f2_lpbase
	.byte 0x9b
	.uleb128 f2_ttbase-.LLSDATTD2
.LLSDATTD2:
	.byte 0x03
	.uleb128 .LLSDACSE2-.LLSDACSB2
.LLSDACSB2:
	.long f2_cs1-f2
	.long f2_cs1_end-f2_cs1
	.long f2_lp1-f2_lpbase
	.uleb128 1
.LLSDACSE2:
	.byte 1, 0
	.align 4
	.long 0
f2_ttbase:
# f3: LPStart pcrel|sdata4 (to f3), udata2 call sites... padded uleb TType offset.
lsda3:
	.byte 0x1b
	.long f3 - .
	.byte 0xff
	.byte 0x02
	.uleb128 .LLSDACSE3-.LLSDACSB3
.LLSDACSB3:
	.short f3_cs1-f3
	.short f3_cs1_end-f3_cs1
	.short f3_lp1-f3
	.uleb128 0
.LLSDACSE3:

	.data
	.align 8
slot4:
	.quad lsda1
`

func TestLSDAHandWritten(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	bin := build(t, dir, "hand", "s", handLSDA, "gcc", "-nostdlib", "-static", "-no-pie")
	im := loadImage(t, bin)
	sym := func(name string) uint64 { return im.symbol(t, name) }
	fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	byStart := map[uint64]FDE{}
	for _, f := range fdes {
		byStart[f.Start] = f
	}
	type want struct {
		fn, lsda, lpstart, ttbase, actions uint64
		sites                              []CallSite
	}
	cases := []want{
		{fn: sym("f1"), lsda: sym("lsda1"), lpstart: sym("f1"), actions: sym("lsda1_actions"), sites: []CallSite{
			{Start: sym("f1_cs1"), End: sym("f1_cs1_end"), LandingPad: sym("f1_lp1"), Action: 0},
			{Start: sym("f1_cs2"), End: sym("f1_cs2_end"), LandingPad: sym("f1_lp2"), Action: 1},
			{Start: sym("f1_cs3"), End: sym("f1_cs3_end"), LandingPad: 0, Action: 0},
		}},
		{fn: sym("f2"), lsda: sym("lsda2"), lpstart: sym("f2_lpbase"), ttbase: sym("f2_ttbase"), sites: []CallSite{
			{Start: sym("f2_cs1"), End: sym("f2_cs1_end"), LandingPad: sym("f2_lp1"), Action: 1},
		}},
		{fn: sym("f3"), lsda: sym("lsda3"), lpstart: sym("f3"), sites: []CallSite{
			{Start: sym("f3_cs1"), End: sym("f3_cs1_end"), LandingPad: sym("f3_lp1"), Action: 0},
		}},
	}
	for _, w := range cases {
		f, ok := byStart[w.fn]
		if !ok {
			t.Fatalf("no FDE for function at %#x", w.fn)
		}
		if f.LSDA != w.lsda || f.LSDAIndirect {
			t.Errorf("FDE %#x: LSDA %#x (indirect %v), want %#x", w.fn, f.LSDA, f.LSDAIndirect, w.lsda)
		}
		l, err := DecodeLSDA(im.except, im.exceptAddr, f.LSDA, f.Start)
		if err != nil {
			t.Fatalf("DecodeLSDA %#x: %v", f.LSDA, err)
		}
		if l.LPStart != w.lpstart || l.TTypeBase != w.ttbase || (w.actions != 0 && l.ActionTable != w.actions) {
			t.Errorf("LSDA %#x: LPStart %#x TTypeBase %#x ActionTable %#x, want %#x %#x %#x",
				f.LSDA, l.LPStart, l.TTypeBase, l.ActionTable, w.lpstart, w.ttbase, w.actions)
		}
		if !slices.Equal(l.CallSites, w.sites) {
			t.Errorf("LSDA %#x call sites:\n got  %+v\n want %+v", f.LSDA, l.CallSites, w.sites)
		}
	}
	f4, ok := byStart[sym("f4")]
	if !ok || !f4.LSDAIndirect || f4.LSDA != sym("slot4") {
		t.Errorf("f4: want indirect LSDA through slot4 %#x, got %+v", sym("slot4"), f4)
	}
	pads, err := LandingPads(fdes, im.except, im.exceptAddr)
	wantPads := []uint64{sym("f1_lp1"), sym("f1_lp2"), sym("f2_lp1"), sym("f3_lp1")}
	slices.Sort(wantPads)
	if !slices.Equal(pads, wantPads) {
		t.Errorf("LandingPads = %#x, want %#x", pads, wantPads)
	}
	var ee *EntryError
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ee) || ee.Offset != f4.Offset {
		t.Errorf("LandingPads error %v: want ErrUnsupported for the indirect LSDA of FDE %#x", err, f4.Offset)
	}
}

func TestLSDAErrors(t *testing.T) {
	const base = 0x5000
	good := cat([]byte{0xff, 0xff, 0x01}, uleb(4), []byte{0x10, 0x08, 0x20, 0x00})
	cases := []struct {
		name   string
		table  []byte
		lsda   uint64
		sentnl error
	}{
		{"before table", good, base - 1, ErrOutOfRange},
		{"after table", good, base + uint64(len(good)), ErrOutOfRange},
		{"empty", nil, base, ErrOutOfRange},
		{"truncated header", []byte{0xff}, base, ErrTruncated},
		{"call-site table too long", cat([]byte{0xff, 0xff, 0x01}, uleb(9), []byte{1, 2}), base, ErrTruncated},
		{"record straddles table end", cat([]byte{0xff, 0xff, 0x01}, uleb(3), []byte{1, 2, 3, 0}), base, ErrTruncated},
		{"bad call-site encoding", cat([]byte{0xff, 0xff, 0x07}, uleb(0)), base, ErrBadEncoding},
		{"textrel call-site encoding", cat([]byte{0xff, 0xff, 0x23}, uleb(0)), base, ErrBadEncoding},
		{"bad TType encoding", cat([]byte{0xff, 0x0e, 0x01}, uleb(0)), base, ErrBadEncoding},
		{"TType past table", cat([]byte{0xff, 0x9b}, uleb(100), []byte{0x01}, uleb(0)), base, ErrOutOfRange},
		{"datarel LPStart", cat([]byte{0x3b}, le32(0), []byte{0xff, 0x01}, uleb(0)), base, ErrUnsupported},
		{"uleb overflow", cat([]byte{0xff, 0xff, 0x01}, uleb(12), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0}), base, ErrBadEncoding},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseLSDA(c.table, base, c.lsda, 0x1000)
			var ee *EntryError
			if !errors.Is(err, c.sentnl) || !errors.As(err, &ee) || ee.Section != ".gcc_except_table" {
				t.Errorf("got %v, want an EntryError wrapping %v", err, c.sentnl)
			}
		})
	}
	sites, err := ParseLSDA(good, base, base, 0x1000)
	want := []CallSite{{Start: 0x1010, End: 0x1018, LandingPad: 0x1020}}
	if err != nil || !slices.Equal(sites, want) {
		t.Errorf("good LSDA: %+v, %v", sites, err)
	}
	// LandingPads skips a bad LSDA and keeps the others.
	fdes := []FDE{{Start: 0x1000, LSDA: base, Offset: 0x10}, {Start: 0x2000, LSDA: base + 100, Offset: 0x40}, {Start: 0x3000, LSDA: base, Offset: 0x70}}
	pads, err := LandingPads(fdes, good, base)
	var ee *EntryError
	if !slices.Equal(pads, []uint64{0x1020, 0x3020}) || !errors.As(err, &ee) || ee.Offset != 0x40 || !errors.Is(err, ErrOutOfRange) {
		t.Errorf("LandingPads: %#x, %v", pads, err)
	}
}

// setIPSpy interposes _Unwind_SetIP, which the personality routine calls
// with the landing pad it chose, and logs every landing pad the real
// unwinder jumps to.
const setIPSpy = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
void _Unwind_SetIP(void *ctx, unsigned long ip) {
	static void (*real)(void *, unsigned long);
	if (!real) real = (void (*)(void *, unsigned long))dlsym(RTLD_NEXT, "_Unwind_SetIP");
	fprintf(stderr, "SETIP %#lx\n", ip);
	real(ctx, ip);
}
`

func TestLandingPadsCxx(t *testing.T) {
	needTool(t, "g++", "gcc", "objdump")
	dir := t.TempDir()
	spy := build(t, dir, "spy.so", "c", setIPSpy, "gcc", "-shared", "-fPIC", "-O2")
	withCatch := []string{"catch_one", "catch_two", "nested", "many", "rare", "main"}
	withCleanup := []string{"raii_only"}
	for _, opt := range []string{"-O0", "-O2", "-O2 -freorder-blocks-and-partition"} {
		t.Run(opt, func(t *testing.T) {
			bin := buildCached(t, "cxx", "cc", cxxSource, "g++", append(strings.Fields(opt), "-no-pie")...)
			im := loadImage(t, bin)
			fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			pads, err := LandingPads(fdes, im.except, im.exceptAddr)
			if err != nil {
				t.Fatalf("LandingPads: %v", err)
			}
			starts, calls := insnStarts(t, bin)
			padsOf := map[uint64]int{} // function start -> landing pads
			nPads := 0
			for _, f := range fdes {
				if f.LSDA == 0 {
					continue
				}
				l, err := DecodeLSDA(im.except, im.exceptAddr, f.LSDA, f.Start)
				if err != nil {
					t.Fatalf("FDE %#x: %v", f.Offset, err)
				}
				for _, cs := range l.CallSites {
					if cs.Start < f.Start || cs.End > f.End || !starts[cs.Start] || (!starts[cs.End] && cs.End != f.End) {
						t.Errorf("function %#x..%#x: region %#x..%#x not on instruction boundaries inside it", f.Start, f.End, cs.Start, cs.End)
					}
					if cs.LandingPad == 0 {
						continue
					}
					nPads++
					padsOf[f.Start]++
					if cs.LandingPad < f.Start || cs.LandingPad >= f.End || !starts[cs.LandingPad] {
						t.Errorf("function %#x..%#x: landing pad %#x is not an instruction start inside it", f.Start, f.End, cs.LandingPad)
					}
					if _, ok := slices.BinarySearch(pads, cs.LandingPad); !ok {
						t.Errorf("landing pad %#x missing from LandingPads", cs.LandingPad)
					}
					hasCall := false
					for a := cs.Start; a < cs.End && !hasCall; a++ {
						hasCall = calls[a]
					}
					if !hasCall {
						t.Errorf("function %#x: region %#x..%#x with landing pad %#x contains no call", f.Start, cs.Start, cs.End, cs.LandingPad)
					}
				}
			}
			for _, fn := range append(withCatch, withCleanup...) {
				if padsOf[im.symbol(t, fn)] == 0 {
					t.Errorf("%s has a catch or a destructor but no landing pad", fn)
				}
			}
			if nPads < len(withCatch)+len(withCleanup) {
				t.Errorf("only %d landing pads", nPads)
			}

			// Runtime oracle: every landing pad the real personality
			// routine picks inside this binary must be one we found.
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+spy)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("running %s: %v\n%s", bin, err, stderr.String())
			}
			seen := map[uint64]bool{}
			for _, line := range strings.Split(stderr.String(), "\n") {
				v, ok := strings.CutPrefix(line, "SETIP ")
				if !ok {
					continue
				}
				ip, err := strconv.ParseUint(v, 0, 64)
				if err != nil {
					t.Fatalf("bad spy line %q", line)
				}
				if inFDE(fdes, ip) {
					seen[ip] = true
				}
			}
			if len(seen) < 6 {
				t.Errorf("the program reached only %d landing pads in its own code (spy output %q)", len(seen), stderr.String())
			}
			for ip := range seen {
				if _, ok := slices.BinarySearch(pads, ip); !ok {
					t.Errorf("unwinder jumped to %#x, not among our landing pads", ip)
				}
			}
			t.Logf("%s: %d FDEs, %d landing pads, %d reached at run time", opt, len(fdes), len(pads), len(seen))
		})
	}
}

func inFDE(fdes []FDE, a uint64) bool {
	for _, f := range fdes {
		if a >= f.Start && a < f.End {
			return true
		}
	}
	return false
}

// TestLandingPadsSystem parses every LSDA of large real C++ binaries.
func TestLandingPadsSystem(t *testing.T) {
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/bin/node", "/lib/x86_64-linux-gnu/libc.so.6"} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			needFile(t, p)
			im := loadImage(t, p)
			fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			nLSDA, nSites := 0, 0
			for _, f := range fdes {
				if f.LSDA == 0 {
					continue
				}
				nLSDA++
				sites, err := ParseLSDA(im.except, im.exceptAddr, f.LSDA, f.Start)
				if err != nil {
					t.Fatalf("FDE %#x (function %#x): %v", f.Offset, f.Start, err)
				}
				for _, cs := range sites {
					nSites++
					if cs.Start < f.Start || cs.End > f.End || cs.LandingPad != 0 && (cs.LandingPad < f.Start || cs.LandingPad >= f.End) {
						t.Errorf("function %#x..%#x: call site %s outside it", f.Start, f.End, fmtSite(cs))
					}
				}
			}
			pads, err := LandingPads(fdes, im.except, im.exceptAddr)
			if err != nil {
				t.Fatalf("LandingPads: %v", err)
			}
			if !slices.IsSorted(pads) || len(slices.Compact(slices.Clone(pads))) != len(pads) {
				t.Errorf("LandingPads result not sorted and unique")
			}
			if im.hasExcept && len(pads) == 0 {
				t.Errorf("%s has .gcc_except_table but no landing pads found", p)
			}
			t.Logf("%s: %d FDEs, %d with LSDA, %d call sites, %d landing pads", p, len(fdes), nLSDA, nSites, len(pads))
		})
	}
}

func fmtSite(cs CallSite) string {
	return fmt.Sprintf("%#x..%#x pad %#x action %d", cs.Start, cs.End, cs.LandingPad, cs.Action)
}
