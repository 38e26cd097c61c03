package analysis

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

const exitsSrc = `
#include <stdlib.h>
volatile int g;
__attribute__((noinline)) int leaf(int x) { return x * 3 + g; }
__attribute__((noinline)) int two_rets(int x) {
	if (x > 10) { g++; return x - g; }
	g += 2;
	return x + g * 5;
}
__attribute__((noinline)) int tail(int x) { g++; return leaf(x + 1); }
__attribute__((noinline)) int sw(int x) {
	switch (x) {
	case 0: return g + 1; case 1: return g * 7; case 2: return g - 3; case 3: return g ^ 9;
	case 4: return g + 11; case 5: return g * 13; default: return 0;
	}
}
__attribute__((noinline)) int loop_to_entry(int x) { while (x > 0) x = x / 2 - g; return x; }
int main(int argc, char **argv) { (void)argv; return leaf(argc) + two_rets(argc) + tail(argc) + sw(argc) + loop_to_entry(argc); }
`

// TestExits checks which functions get return sites and that each site leads to its
// ret: the ret itself, or straight-line code before it.
func TestExits(t *testing.T) {
	for _, opt := range []string{"-O2", "-O0", "-O3"} {
		t.Run(opt, func(t *testing.T) {
			b := analyzeFile(t, build(t, exitsSrc, "c", opt, "-fcf-protection=none"), Options{})
			for _, name := range []string{"leaf", "two_rets", "tail", "sw", "loop_to_entry", "main"} {
				f := fn(t, b, name)
				sites, why := b.Exits(f.Addr, nil)
				t.Logf("%s: %d sites %s", name, len(sites), why)
				if why == "" && len(sites) == 0 {
					t.Errorf("%s: no sites and no reason", name)
				}
				for _, s := range sites {
					if s.Verdict != Optimize || s.Func == nil || s.DCRLen < jmpLen || (s.Func != f && !strings.HasSuffix(s.Func.Name, ".cold")) {
						t.Errorf("%s: bad exit site %+v", name, s)
					}
				}
			}
			// a function with one straight path always has its ret counted
			if s, why := b.Exits(fn(t, b, "leaf").Addr, nil); len(s) != 1 {
				t.Errorf("leaf: %d exit sites (%s), want 1", len(s), why)
			}
			// a tail call is an exit (at -O2 and -O3 gcc makes it a jmp): its site is
			// the jmp rel32 itself
			if opt != "-O0" {
				f := fn(t, b, "tail")
				sites, why := b.Exits(f.Addr, nil)
				if len(sites) != 1 {
					t.Fatalf("tail: %d sites (%s), want 1", len(sites), why)
				}
				last := sites[0].DCR[len(sites[0].DCR)-1].Addr
				if in, err := x86dec.DecodeFast(b.code(last, 16), last); err != nil || in.Kind != x86dec.KindJmp || in.Target != fn(t, b, "leaf").Addr {
					t.Errorf("tail: the exit site's DCR ends with %v (%v), want the tail-call jmp to leaf", in.Kind, err)
				}
			}
			// a site another probe is on is not used
			f := fn(t, b, "leaf")
			if sites, _ := b.Exits(f.Addr, nil); len(sites) == 1 {
				if again, why := b.Exits(f.Addr, func(uint64) []uint64 { return []uint64{sites[0].Addr + 1} }); len(again) == 1 && again[0].Addr == sites[0].Addr {
					t.Errorf("leaf: exit site %#x kept with a probe inside its DCR (%s)", sites[0].Addr, why)
				}
			}
		})
	}
}

// TestSystemExits reports the share of function entries of real binaries whose
// returns can be counted at their rets, and the reasons for the rest.
func TestSystemExits(t *testing.T) {
	for _, p := range []string{"/usr/bin/python3.11", "/usr/bin/git"} {
		t.Run(strings.ReplaceAll(p, "/", "_"), func(t *testing.T) {
			if _, err := os.Stat(p); err != nil {
				t.Skipf("%s: %v", p, err)
			}
			b := analyzeFile(t, p, Options{})
			n, ok := 0, 0
			why := map[string]int{}
			for _, s := range b.EntrySites() {
				if s.Verdict == Refuse {
					continue
				}
				n++
				sites, reason := b.Exits(s.Addr, nil)
				if _, after := b.ExitsAfter(s.Addr, nil); after != "" {
					checkExitRule(t, after)
				}
				if reason == "" {
					ok++
					for _, e := range sites {
						if e.Verdict != Optimize {
							t.Fatalf("%s: exit site %#x has verdict %v", s.FuncName, e.Addr, e.Verdict)
						}
					}
					continue
				}
				rule := checkExitRule(t, reason)
				if why[rule]++; why[rule] <= 3 && testing.Verbose() {
					t.Logf("%s: %s", s.FuncName, reason)
				}
			}
			t.Logf("%s: %d of %d entries (%.1f%%) have countable exits; the rest:\n%s", p, ok, n, 100*float64(ok)/float64(n), topCounts(why, 8))
			if ok == 0 {
				t.Errorf("%s: no function has countable exits", p)
			}
		})
	}
}

// jccRetSrc has a ret right after a jcc (no room for a jmp between them) and a data
// word that equals an address inside one of its instructions (a number, not a code
// pointer).
const jccRetSrc = `
__asm__(".text\n.globl jccret\n.type jccret,@function\njccret:\n.cfi_startproc\n"
	"movq 8(%rdi),%rax\n testb $0x40,0xa9(%rax)\n jne 1f\n xorl %eax,%eax\n ret\n"
	"1: subq $0x18,%rsp\n.cfi_adjust_cfa_offset 0x18\n movq %rdi,%rax\n addq $0x18,%rsp\n.cfi_adjust_cfa_offset -0x18\n ret\n"
	".cfi_endproc\n.size jccret,.-jccret\n"
	".data\n.globl inside\ninside: .quad jccret+1\n.text\n");
extern long jccret(void *);
int main(void) { return (int)jccret((void *)0); }
`

// TestExitsAfter: for probes that run after the code before the exit (--exits), a site
// may start at a jcc that leaves the range, where Exits finds no room for a jmp; a
// data word inside an instruction does not count as a taken address.
func TestExitsAfter(t *testing.T) {
	b := analyzeFile(t, build(t, jccRetSrc, "c", "-O2", "-no-pie"), Options{})
	f := fn(t, b, "jccret")
	if _, why := b.Exits(f.Addr, nil); !strings.Contains(why, "follows a jcc") {
		t.Fatalf("Exits: %q, want the ret too close after the jcc", why)
	}
	sites, why := b.ExitsAfter(f.Addr, nil)
	if why != "" || len(sites) != 2 {
		t.Fatalf("ExitsAfter: %d sites (%s), want 2", len(sites), why)
	}
	// the first site is the jne (jne, xor, ret: 5 bytes), the second the add before the
	// other ret; both lead to a ret
	if sites[0].Addr != f.Addr+11 || sites[0].ExitInsn != f.Addr+15 || sites[0].TailCall {
		t.Errorf("first site %#x (exit %#x), want %#x (%#x)", sites[0].Addr, sites[0].ExitInsn, f.Addr+11, f.Addr+15)
	}
	if sites[1].ExitInsn != sites[1].Addr+4 || sites[1].Verdict != Optimize {
		t.Errorf("second site %#x (exit %#x)", sites[1].Addr, sites[1].ExitInsn)
	}
}

// brTailSrc's one ret is preceded by an instruction that a jne also reaches, and
// followed by padding: no 5 bytes end at the ret without covering that branch target.
const brTailSrc = `
__asm__(".text\n.globl brtail\n.type brtail,@function\nbrtail:\n.cfi_startproc\n"
	"movl $1,%eax\n testl %edi,%edi\n jne 1f\n movl $3,%eax\n"
	"1: xorl %edx,%edx\n ret\n .byte 0x0f,0x1f,0x00\n"
	".cfi_endproc\n.size brtail,.-brtail\n");
extern int brtail(int);
int main(int argc, char **argv) { (void)argv; return brtail(argc); }
`

// TestExitsAtBranchTarget: when the code before a ret is a branch target, the exit site
// starts at that target if it, the ret and the padding after it hold a jmp: whatever
// jumps there runs the detour as what falls through does.
func TestExitsAtBranchTarget(t *testing.T) {
	b := analyzeFile(t, build(t, brTailSrc, "c", "-O2", "-no-pie"), Options{})
	f := fn(t, b, "brtail")
	for _, after := range []bool{false, true} {
		exits := b.Exits
		if after {
			exits = b.ExitsAfter
		}
		sites, why := exits(f.Addr, nil)
		// movl(5) testl(2) jne(2) movl(5): the target at +14, the ret at +16
		if why != "" || len(sites) != 1 || sites[0].Addr != f.Addr+14 || sites[0].ExitInsn != f.Addr+16 || sites[0].DCRLen < jmpLen {
			t.Fatalf("after %v: %d sites %+v (%s), want one at %#x leading to the ret at %#x", after, len(sites), sites, why, f.Addr+14, f.Addr+16)
		}
	}
	// with a probe on the padding the site has no room: the reason names the target
	if _, why := b.ExitsAfter(f.Addr, func(uint64) []uint64 { return []uint64{f.Addr + 17} }); !strings.Contains(why, "is a branch target") {
		t.Errorf("a probe on the padding: %q, want the branch target named", why)
	}
}

// checkExitRule returns the rule id a reason of Exits starts with, failing t unless
// ExitRules (docs/rules.md) lists it.
func checkExitRule(t *testing.T, reason string) string {
	t.Helper()
	rule, _, _ := strings.Cut(reason, ":")
	if !slices.ContainsFunc(ExitRules, func(r ExitRule) bool { return r.ID == rule }) {
		t.Fatalf("reason %q: %s is not in ExitRules", reason, rule)
	}
	return rule
}
