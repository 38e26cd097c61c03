package analysis

import (
	"strings"
	"testing"
)

// rbpSrc has indirect jmps whose target is read through %rbp: as a general
// register (-fomit-frame-pointer code, e.g. CPython's PyObject_Hash) the
// load is from ordinary memory; as a frame pointer it is a stack slot.
const rbpSrc = `
int main(void) { return 0; }
__asm__(
".text\n"
".p2align 4\n"
".globl rbp_gen\n.type rbp_gen,@function\nrbp_gen:\n"
"  push %rbp\n  push %rbx\n  mov %rdi,%rbx\n  sub $8,%rsp\n"
"  mov 8(%rdi),%rbp\n"
"  test %rbx,%rbx\n  je 1f\n  add $16,%rbp\n"
"1:mov 8(%rbp),%rax\n"
"  add $8,%rsp\n  pop %rbx\n  pop %rbp\n  jmp *%rax\n"
".size rbp_gen,.-rbp_gen\n"
".p2align 4\n"
".globl rbp_genmem\n.type rbp_genmem,@function\nrbp_genmem:\n"
"  push %rbx\n  push %rbp\n  mov %rdi,%rbx\n  mov %rbx,%rbp\n  mov (%rbp),%rbp\n"
"  jmp *16(%rbp)\n"
".size rbp_genmem,.-rbp_genmem\n"
".p2align 4\n"
".globl rbp_frame\n.type rbp_frame,@function\nrbp_frame:\n"
"  push %rbp\n  mov %rsp,%rbp\n  sub $16,%rsp\n"
"  mov %rdi,-8(%rbp)\n  mov -8(%rbp),%rax\n  leave\n  jmp *%rax\n"
".size rbp_frame,.-rbp_frame\n"
".p2align 4\n"
".globl rbp_framemem\n.type rbp_framemem,@function\nrbp_framemem:\n"
"  push %rbp\n  push %rbx\n  push %rdi\n  lea 8(%rsp),%rbp\n"
"  jmp *-8(%rbp)\n"
".size rbp_framemem,.-rbp_framemem\n"
".p2align 4\n"
".globl rbp_mixed\n.type rbp_mixed,@function\nrbp_mixed:\n"
"  push %rbp\n  push %rbx\n  push %rdi\n  test %rdi,%rdi\n  je 1f\n"
"  mov (%rdi),%rbp\n  jmp 2f\n"
"1:mov %rsp,%rbp\n"
"2:mov 0(%rbp),%rax\n  pop %rdi\n  pop %rbx\n  pop %rbp\n  jmp *%rax\n"
".size rbp_mixed,.-rbp_mixed\n"
".p2align 4\n"
".globl rbp_caller\n.type rbp_caller,@function\nrbp_caller:\n"
"  push %rbx\n  push %rbx\n  pop %rbx\n  pop %rbx\n"
"  mov -8(%rbp),%rax\n  jmp *%rax\n"
".size rbp_caller,.-rbp_caller\n"
".p2align 4\n"
".globl rbp_popped\n.type rbp_popped,@function\nrbp_popped:\n"
"  push %rbx\n  push %rbx\n  pop %rbx\n  pop %rbp\n"
"  mov 8(%rbp),%rax\n  jmp *%rax\n"
".size rbp_popped,.-rbp_popped\n"
);
`

func TestRbpGeneralRegister(t *testing.T) {
	b := analyzeFile(t, build(t, rbpSrc, "c", "-O1", "-no-pie", "-fcf-protection=none"), Options{})
	for _, name := range []string{"rbp_gen", "rbp_genmem"} {
		s := entry(t, b, name, SiteRequest{})
		wantVerdict(t, s, Optimize)
		if r := reason(t, s, RulePointerJump); !r.Note || !strings.Contains(r.Detail, "loaded from memory") {
			t.Errorf("%s: %v", name, r)
		}
	}
	// %rbp as a frame pointer (set from %rsp on some path, or the caller's
	// or a popped value) addresses stack slots: the jmp stays unresolved.
	for _, name := range []string{"rbp_frame", "rbp_framemem", "rbp_mixed", "rbp_caller", "rbp_popped"} {
		s := entry(t, b, name, SiteRequest{})
		wantVerdict(t, s, Boost)
		if r := reason(t, s, RuleIndirectJump); !strings.Contains(r.Detail, "stack slot") {
			t.Errorf("%s: %v", name, r)
		}
	}
}
