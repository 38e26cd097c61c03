package tests

import (
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// retAddrSrc uses the C library functions that read or pop their own return address:
// setjmp/sigsetjmp save it in the jmp_buf, vfork pops it (and both return twice).
const retAddrSrc = `
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static jmp_buf jb;
static sigjmp_buf sjb;
__attribute__((noinline)) static void jump(int v) { longjmp(jb, v); }
int main(void) {
	volatile int n = 0;
	int v = setjmp(jb);
	if (v < 3) { n++; jump(v + 1); }
	printf("setjmp %d %d\n", v, n);
	if (!sigsetjmp(sjb, 1)) siglongjmp(sjb, 7);
	printf("sigsetjmp\n");
	for (int i = 0; i < 3; i++) {
		pid_t p = vfork();
		if (p == 0) _exit(40 + i);
		int st;
		waitpid(p, &st, 0);
		printf("vfork %d\n", WEXITSTATUS(st));
	}
	return 0;
}
`

// retAddrCxxSrc throws through frames: libgcc's unwinder starts from
// __builtin_return_address(0) (uw_init_context_1).
const retAddrCxxSrc = `
#include <cstdio>
#include <stdexcept>
__attribute__((noinline)) int thrower(int n) { if (n > 2) throw std::runtime_error("big"); return n; }
__attribute__((noinline)) int middle(int n) { return thrower(n) + 1; }
int main() {
	int sum = 0;
	for (int i = 0; i < 6; i++) {
		try { sum += middle(i); } catch (const std::exception &e) { sum += 100; }
	}
	std::printf("%d\n", sum);
	return 0;
}
`

// TestReturnAddressUsers: return probes on functions that read or pop their own
// return address broke static programs (longjmp to the trampoline, vfork's exit 255,
// every C++ throw crashing, static dlopen), and check rated them "optimize" (issue 13).
// The analysis now refuses them (retprobe-return-address, or the do-not-probe list),
// and a static program with a return probe on every other function runs as before.
func TestReturnAddressUsers(t *testing.T) {
	testprog.Need(t, "gcc")
	for _, c := range []struct {
		name, src, lang string
		refused         map[string]string // function -> rule
	}{
		{"c", retAddrSrc, "c", map[string]string{"_setjmp": "retprobe-return-address", "__sigsetjmp": "retprobe-return-address",
			"__libc_vfork": "retprobe-return-address", "_dl_runtime_resolve_xsavec": "retprobe-do-not-probe"}},
		{"c++", retAddrCxxSrc, "c++", map[string]string{"uw_init_context_1": "retprobe-return-address",
			"_Unwind_RaiseException": "retprobe-do-not-probe"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := testprog.Build(t, c.src, c.lang, "-O2", "-static")
			dir := t.TempDir()
			for fn, rule := range c.refused {
				code, out, stderr := kp("check", "-e", "r:g/x "+fn, prog)
				if code != 0 {
					if strings.Contains(stderr, "no symbol") {
						continue // not in this C library
					}
					t.Fatalf("check %s: %s", fn, stderr)
				}
				if !strings.Contains(out, " refuse ") || !strings.Contains(out, rule+" at ") {
					t.Errorf("check r:%s: want refused by %s:\n%s", fn, rule, out)
				}
			}
			want := testprog.Run(t, testprog.Cmd{Path: prog})
			if want.Exit != 0 {
				t.Fatalf("original: %s", want)
			}
			out, _ := rewriteEntries(t, prog, dir, true)
			got := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + dir + "/t.trace"}})
			if got.Exit != want.Exit || got.Stdout != want.Stdout {
				t.Errorf("rewritten: %s\nwant: %s", got, want)
			}
		})
	}
}

// retAddrOwnSrc: the program's own functions: one takes __builtin_return_address(0),
// one pops its return address (asm), one is plain.
const retAddrOwnSrc = `
#include <stdio.h>
__attribute__((noinline)) void *caller_of(void) { return __builtin_return_address(0); }
__attribute__((noinline)) int plain(int a) { return a * 3 + 1; }
__attribute__((naked, noinline)) long popper(void) { __asm__ volatile("pop %rax\n\tjmp *%rax\n"); }
int main(void) { printf("%d %d\n", caller_of() != 0, plain(2)); return 0; }
`

// TestReturnAddressRule: the rule judges code, not names: at -O0 with a frame pointer
// (the slot read through %rbp) and at -O2 (through %rsp), and a plain function keeps
// its verdict.
func TestReturnAddressRule(t *testing.T) {
	testprog.Need(t, "gcc")
	for _, flags := range [][]string{{"-O0"}, {"-O2"}, {"-O2", "-fno-omit-frame-pointer"}} {
		prog := testprog.Build(t, retAddrOwnSrc, "c", flags...)
		for fn, refused := range map[string]bool{"caller_of": true, "popper": true, "plain": false} {
			code, out, stderr := kp("check", "-e", "r:g/x "+fn, prog)
			if code != 0 {
				t.Fatalf("%v check %s: %s", flags, fn, stderr)
			}
			if got := strings.Contains(out, "retprobe-return-address at "); got != refused {
				t.Errorf("%v r:%s: refused %v, want %v:\n%s", flags, fn, got, refused, out)
			}
		}
	}
}
