package analysis

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
)

// rulesSrc builds exact byte patterns with top-level asm, one function per
// rule (or per way a rule fires). Symbols starting with .L are labels.
const rulesSrc = `
#include <stdio.h>
extern int r1_boundary(int), r1_disagree(int), r1_invalid(int), r1_endbr(int);
int main(int argc, char **argv) { (void)argv; printf("%d\n", r1_boundary(argc)); return 0; }
long r7_var = 42;
void *r4_slot = (void *)main;

__asm__(
".text\n"
".p2align 4\n"
/* rule 1 */
".globl r1_boundary\n.type r1_boundary,@function\nr1_boundary:\n"
"  mov $1,%eax\n"          /* b8 01 00 00 00 */
"  ret\n"
".size r1_boundary,.-r1_boundary\n"
".p2align 4\n"
".globl r1_disagree\n.type r1_disagree,@function\nr1_disagree:\n"
"  push %rbx\n"
"  mov %edi,%eax\n"
"  add $1,%eax\n"
"r1_disagree_bad:\n"
"  .byte 0x67,0xc4,0x61,0xf9,0x7e,0xe8\n" /* addr32 vmovq %xmm13,%rax: x86asm cannot name it */
"r1_disagree_after:\n"
"  pop %rbx\n"
"  ret\n"
".size r1_disagree,.-r1_disagree\n"
".p2align 4\n"
".globl r1_invalid\n.type r1_invalid,@function\nr1_invalid:\n"
"  push %rbx\n  mov %edi,%eax\n  add $1,%eax\n"
"r1_invalid_bad:\n"
"  .byte 0x06\n"            /* push %es: invalid in 64-bit mode */
"  pop %rbx\n  ret\n"
".size r1_invalid,.-r1_invalid\n"
".p2align 4\n"
".globl r1_endbr\n.type r1_endbr,@function\nr1_endbr:\n"
"  endbr64\n  push %rbp\n  mov %rsp,%rbp\n  vzeroupper\n  pop %rbp\n  ret\n"
".size r1_endbr,.-r1_endbr\n"

/* rule 2 */
".p2align 4\n"
".globl r2_short\n.type r2_short,@function\nr2_short:\n"
"  xor %eax,%eax\n  ret\n"
".size r2_short,.-r2_short\n"
".globl r2_next\n.type r2_next,@function\nr2_next:\n"   /* no padding: starts right after */
"  xor %eax,%eax\n  ret\n"
".size r2_next,.-r2_next\n"
".p2align 4\n"
".globl r2_padded\n.type r2_padded,@function\nr2_padded:\n"
"  xor %eax,%eax\n  ret\n"
".size r2_padded,.-r2_padded\n"
".p2align 4\n"
".globl r2_targeted\n.type r2_targeted,@function\nr2_targeted:\n"
"  xor %eax,%eax\n  ret\n"
".size r2_targeted,.-r2_targeted\n"
"r2_pad_target:\n  nop\n  nop\n  nop\n  nop\n  nop\n  nop\n"
".p2align 4\n"
".globl r2_jumper\n.type r2_jumper,@function\nr2_jumper:\n"
"  test %edi,%edi\n  je r2_pad_target\n  ret\n"
".size r2_jumper,.-r2_jumper\n"
".p2align 4\n"
".globl r2_cross\n.type r2_cross,@function\nr2_cross:\n"
"  nop\n  nop\n  nop\n"
".size r2_cross,.-r2_cross\n"
".globl r2_cross_next\n.type r2_cross_next,@function\nr2_cross_next:\n"
"  ret\n"
".size r2_cross_next,.-r2_cross_next\n"

/* rule 3 */
".p2align 4\n"
".globl r3_loop\n.type r3_loop,@function\nr3_loop:\n"
"  push %rbx\n"            /* 1 */
"  xor %eax,%eax\n"        /* 2 */
"r3_loop_head:\n"
"  add %edi,%eax\n"        /* 2: entry+3, inside the entry DCR */
"  dec %edi\n"
"r3_loop_jne:\n"
"  jne r3_loop_head\n"
"  pop %rbx\n  ret\n"
".size r3_loop,.-r3_loop\n"
".p2align 4\n"
".globl r3_victim\n.type r3_victim,@function\nr3_victim:\n"
"  push %rbx\n  mov %edi,%eax\n"
"r3_victim_mid:\n"
"  add $1,%eax\n  pop %rbx\n  ret\n"
".size r3_victim,.-r3_victim\n"
".p2align 4\n"
".globl r3_other\n.type r3_other,@function\nr3_other:\n"
"  test %edi,%edi\n"
"r3_other_jmp:\n"
"  jne r3_victim_mid\n"
"  ret\n"
".size r3_other,.-r3_other\n"
"r3_gap:\n"               /* code that belongs to no function */
"  jmp r3_gapvictim_mid\n"
".p2align 4\n"
".globl r3_gapvictim\n.type r3_gapvictim,@function\nr3_gapvictim:\n"
"  push %rbx\n  mov %edi,%eax\n"
"r3_gapvictim_mid:\n"
"  add $2,%eax\n  pop %rbx\n  ret\n"
".size r3_gapvictim,.-r3_gapvictim\n"
".p2align 4\n"
".globl r3_jumper\n.type r3_jumper,@function\nr3_jumper:\n" /* a jmp rel8 into another function, then padding */
"  mov %edi,%eax\n"
"r3_jumper_jmp:\n"
"  jmp r3_jmpvictim_mid\n"
".p2align 4\n"
".size r3_jumper,.-r3_jumper\n"
".globl r3_jmpvictim\n.type r3_jmpvictim,@function\nr3_jmpvictim:\n"
"  push %rbx\n  mov %edi,%eax\n"
"r3_jmpvictim_mid:\n"
"  add $2,%eax\n  pop %rbx\n  ret\n"
".size r3_jmpvictim,.-r3_jmpvictim\n"
".p2align 4\n"
".globl r3_callvictim\n.type r3_callvictim,@function\nr3_callvictim:\n"
"  push %rbx\n  mov %edi,%eax\n"
"r3_callvictim_mid:\n"
"  add $3,%eax\n  pop %rbx\n  ret\n"
".size r3_callvictim,.-r3_callvictim\n"
".p2align 4\n"
".globl r3_caller\n.type r3_caller,@function\nr3_caller:\n"
"r3_caller_call:\n"
"  call r3_callvictim_mid\n  ret\n"
".size r3_caller,.-r3_caller\n"
".p2align 4\n"
".globl r3_leavictim\n.type r3_leavictim,@function\nr3_leavictim:\n"
"  push %rbx\n  mov %edi,%eax\n"
"r3_leavictim_mid:\n"
"  add $4,%eax\n  pop %rbx\n  ret\n"
".size r3_leavictim,.-r3_leavictim\n"
".p2align 4\n"
".globl r3_leataker\n.type r3_leataker,@function\nr3_leataker:\n"
"r3_leataker_lea:\n"
"  lea r3_leavictim_mid(%rip),%rax\n  ret\n"
".size r3_leataker,.-r3_leataker\n"
/* data words: one that equals an address inside an instruction of the region (+4, in
 * the add) is no code pointer; one at an instruction of it (+1) may be */
".p2align 4\n"
".globl r3_wordvictim\n.type r3_wordvictim,@function\nr3_wordvictim:\n"
"  push %rbx\n  mov %edi,%eax\n  add $4,%eax\n  pop %rbx\n  ret\n"
".size r3_wordvictim,.-r3_wordvictim\n"
".p2align 4\n"
".globl r3_wordvictim2\n.type r3_wordvictim2,@function\nr3_wordvictim2:\n"
"  push %rbx\n  mov %edi,%eax\n  add $4,%eax\n  pop %rbx\n  ret\n"
".size r3_wordvictim2,.-r3_wordvictim2\n"
".pushsection .data\n"
".globl r3_words\nr3_words:\n  .quad r3_wordvictim+4\n  .quad r3_wordvictim2+1\n"
".popsection\n"

".p2align 4\n"
".globl r3_endbr\n.type r3_endbr,@function\nr3_endbr:\n"
"  push %rbx\n"
"r3_endbr_mid:\n"
"  endbr64\n  mov %edi,%eax\n  pop %rbx\n  ret\n"
".size r3_endbr,.-r3_endbr\n"

/* rule 4 */
".p2align 4\n"
".globl r4_unres\n.type r4_unres,@function\nr4_unres:\n"
"  push %rbx\n"
"  lea r4_unres_l(%rip),%rax\n"
"r4_unres_back:\n"
"  add %rdi,%rax\n"
"  pop %rbx\n"
"r4_unres_jmp:\n"
"  jmp *%rax\n"
"r4_unres_l:\n  ret\n"
".size r4_unres,.-r4_unres\n"
".p2align 4\n"
".globl r4_frag\n.type r4_frag,@function\nr4_frag:\n"   /* a split fragment jumping back into r4_unres */
"  mov %edi,%eax\n  add $1,%eax\n  push %rbx\n  jmp r4_unres_back\n"
".size r4_frag,.-r4_frag\n"
".p2align 4\n"
".globl r4_ptr\n.type r4_ptr,@function\nr4_ptr:\n"
"  mov 8(%rdi),%rax\n"
"r4_ptr_jmp:\n"
"  jmp *%rax\n"
".size r4_ptr,.-r4_ptr\n"
".p2align 4\n"
".globl r4_got\n.type r4_got,@function\nr4_got:\n"
"  jmp *r4_slot(%rip)\n"
".size r4_got,.-r4_got\n"
".p2align 4\n"
".globl r4_arg\n.type r4_arg,@function\nr4_arg:\n"
"  push %rbx\n  mov %rdi,%rax\n  pop %rbx\n  jmp *%rax\n"
".size r4_arg,.-r4_arg\n"
".p2align 4\n"
".globl r4_spill\n.type r4_spill,@function\nr4_spill:\n"   /* a loaded pointer kept in a stack slot across a call */
"  push %rbx\n  sub $0x10,%rsp\n"
"  mov 8(%rdi),%rax\n  mov %rax,8(%rsp)\n"
"  push %rax\n  call r4_arg\n  pop %rcx\n"
"  mov 8(%rsp),%rax\n  add $0x10,%rsp\n  pop %rbx\n  jmp *%rax\n"
".size r4_spill,.-r4_spill\n"
".p2align 4\n"
".globl r4_spilladd\n.type r4_spilladd,@function\nr4_spilladd:\n" /* a computed target kept in a stack slot */
"  push %rbx\n  sub $0x10,%rsp\n"
"  lea r4_spilladd(%rip),%rax\n  add %rdi,%rax\n  mov %rax,(%rsp)\n"
"  call r4_arg\n"
"  mov (%rsp),%rax\n  add $0x10,%rsp\n  pop %rbx\n  jmp *%rax\n"
".size r4_spilladd,.-r4_spilladd\n"
".p2align 4\n"
".globl r4_spillpart\n.type r4_spillpart,@function\nr4_spillpart:\n" /* half of the slot overwritten */
"  push %rbx\n  sub $0x10,%rsp\n"
"  mov 8(%rdi),%rax\n  mov %rax,(%rsp)\n  mov %edi,4(%rsp)\n"
"  mov (%rsp),%rax\n  add $0x10,%rsp\n  pop %rbx\n  jmp *%rax\n"
".size r4_spillpart,.-r4_spillpart\n"
".p2align 4\n"
".globl r4_table\n.type r4_table,@function\nr4_table:\n"
"  mov %edi,%edi\n"
"r4_table_tgt:\n"          /* entry+2: a table entry lands here */
"  cmp $2,%edi\n"
"  ja r4_table_def\n"
"  lea r4_tab(%rip),%rdx\n"
"  movslq (%rdx,%rdi,4),%rax\n"
"  add %rdx,%rax\n"
"r4_table_jmp:\n"
"  jmp *%rax\n"
"r4_table_c1:\n  mov $1,%eax\n  ret\n"
"r4_table_def:\n  xor %eax,%eax\n  ret\n"
".size r4_table,.-r4_table\n"
".section .rodata\n"
".p2align 2\n"
"r4_tab:\n  .long r4_table_c1-r4_tab, r4_table_tgt-r4_tab, r4_table_def-r4_tab\n"
".text\n"
/* a table indexed by a 32-bit copy of the register its bound is checked on, made
   before a loop (r4_copyidx); in r4_copybad the checked register changes after it */
".p2align 4\n"
".globl r4_copyidx\n.type r4_copyidx,@function\nr4_copyidx:\n"
"  push %rbx\n  mov %edi,%ecx\n  xor %eax,%eax\n"
"r4_copyidx_loop:\n  add $1,%eax\n  cmp $3,%eax\n  jb r4_copyidx_loop\n"
"  cmp $2,%edi\n  ja r4_copyidx_def\n"
"  lea r4_ctab(%rip),%rdx\n  movslq (%rdx,%rcx,4),%rax\n  add %rdx,%rax\n  jmp *%rax\n"
"r4_copyidx_c0:\n  mov $10,%eax\n  pop %rbx\n  ret\n"
"r4_copyidx_c1:\n  mov $11,%eax\n  pop %rbx\n  ret\n"
"r4_copyidx_def:\n  xor %eax,%eax\n  pop %rbx\n  ret\n"
".size r4_copyidx,.-r4_copyidx\n"
".p2align 4\n"
".globl r4_copybad\n.type r4_copybad,@function\nr4_copybad:\n"
"  push %rbx\n  mov %edi,%ecx\n  xor %eax,%eax\n"
"r4_copybad_loop:\n  add $1,%eax\n  add $7,%edi\n  cmp $3,%eax\n  jb r4_copybad_loop\n"
"  cmp $2,%edi\n  ja r4_copybad_def\n"
"  lea r4_ctab2(%rip),%rdx\n  movslq (%rdx,%rcx,4),%rax\n  add %rdx,%rax\n  jmp *%rax\n"
"r4_copybad_c0:\n  mov $10,%eax\n  pop %rbx\n  ret\n"
"r4_copybad_def:\n  xor %eax,%eax\n  pop %rbx\n  ret\n"
".size r4_copybad,.-r4_copybad\n"
".section .rodata\n"
".p2align 2\n"
"r4_ctab:\n  .long r4_copyidx_c0-r4_ctab, r4_copyidx_c1-r4_ctab, r4_copyidx_c0-r4_ctab\n"
"r4_ctab2:\n  .long r4_copybad_c0-r4_ctab2, r4_copybad_c0-r4_ctab2, r4_copybad_c0-r4_ctab2\n"
".text\n"

/* rule 5: a hand-made LSDA whose landing pad is inside the entry DCR */
".p2align 4\n"
".globl r5_lp\n.type r5_lp,@function\nr5_lp:\n"
".cfi_startproc\n"
".cfi_lsda 0x1b, .LLSDA_r5\n"
"  nop\n  push %rbx\n"
".cfi_adjust_cfa_offset 8\n"
"r5_pad:\n"
"  mov %edi,%eax\n  pop %rbx\n"
".cfi_adjust_cfa_offset -8\n"
"  ret\n"
".cfi_endproc\n"
".size r5_lp,.-r5_lp\n"
".section .gcc_except_table,\"a\",@progbits\n"
".LLSDA_r5:\n"
"  .byte 0xff\n  .byte 0xff\n  .byte 0x1\n"
"  .uleb128 .LcsE_r5-.LcsB_r5\n"
".LcsB_r5:\n"
"  .uleb128 0\n  .uleb128 1\n  .uleb128 r5_pad-r5_lp\n  .uleb128 0\n"
".LcsE_r5:\n"
".text\n"

".p2align 4\n"
".globl r5_badlsda\n.type r5_badlsda,@function\nr5_badlsda:\n"
".cfi_startproc\n"
".cfi_lsda 0x1b, .LLSDA_bad\n"
"  push %rbx\n  mov %edi,%eax\n  pop %rbx\n  ret\n"
".cfi_endproc\n"
".size r5_badlsda,.-r5_badlsda\n"
".section .gcc_except_table,\"a\",@progbits\n"
".LLSDA_bad:\n"
"  .byte 0xff\n  .byte 0xff\n  .byte 0x77\n  .byte 0x04\n  .byte 0, 0, 0, 0\n" /* bad call-site encoding */
".text\n"

/* rule 6 */
".p2align 4\n"
".globl r6_int3\n.type r6_int3,@function\nr6_int3:\n"
"  nop\n"
"r6_int3_cc:\n"
"  int3\n  nop\n  nop\n  nop\n  ret\n"
".size r6_int3,.-r6_int3\n"

/* rule 7 */
".p2align 4\n"
".globl r7_call_mid\n.type r7_call_mid,@function\nr7_call_mid:\n"
"  call *%rax\n  nop\n  nop\n  nop\n  ret\n"
".size r7_call_mid,.-r7_call_mid\n"
".p2align 4\n"
".globl r7_call_end\n.type r7_call_end,@function\nr7_call_end:\n"
"  push %rbx\n"
"r7_call_end_call:\n"
"  call r3_other\n  pop %rbx\n  ret\n"
".size r7_call_end,.-r7_call_end\n"
".p2align 4\n"
".globl r7_riprel\n.type r7_riprel,@function\nr7_riprel:\n"
"  nop\n"
"r7_riprel_lea:\n"
"  lea -0x7ffffff0(%rip),%rax\n  ret\n"
".size r7_riprel,.-r7_riprel\n"
".p2align 4\n"
".globl r7_riprel_ok\n.type r7_riprel_ok,@function\nr7_riprel_ok:\n"
"  mov r7_var(%rip),%eax\n  ret\n"
".size r7_riprel_ok,.-r7_riprel_ok\n"
".p2align 4\n"
".globl r7_io\n.type r7_io,@function\nr7_io:\n"
"  nop\n"
"r7_io_in:\n"
"  in $0x60,%al\n  nop\n  nop\n  ret\n"
".size r7_io,.-r7_io\n"
".p2align 4\n"
".globl r7_far\n.type r7_far,@function\nr7_far:\n"
"  nop\n"
"r7_far_jmp:\n"
"  ljmp *(%rax)\n  nop\n  nop\n  ret\n"
".size r7_far,.-r7_far\n"
".p2align 4\n"
".globl r7_branch_far\n.type r7_branch_far,@function\nr7_branch_far:\n"
"  nop\n  nop\n"
"r7_branch_far_jmp:\n"
"  .byte 0xe9\n  .long 0x80000000\n"
".size r7_branch_far,.-r7_branch_far\n"
".p2align 4\n"
".globl r7_jrcxz\n.type r7_jrcxz,@function\nr7_jrcxz:\n"
"  mov %edi,%ecx\n  jrcxz r7_jrcxz_out\n  nop\n  nop\n  nop\n"
"r7_jrcxz_out:\n  ret\n"
".size r7_jrcxz,.-r7_jrcxz\n"

/* boosting */
".p2align 4\n"
".globl b_pushf\n.type b_pushf,@function\nb_pushf:\n"
"  pushf\n  pop %rax\n  nop\n  nop\n  nop\n  ret\n"
".size b_pushf,.-b_pushf\n"
".p2align 4\n"
".globl b_jcc\n.type b_jcc,@function\nb_jcc:\n"
"  test %edi,%edi\n"
"b_jcc_jne:\n"
"  jne b_jcc_out\n  nop\n  nop\n  nop\n"
"b_jcc_out:\n  ret\n"
".size b_jcc,.-b_jcc\n"
);
`

func rulesBinary(t *testing.T, opt Options) *Binary {
	t.Helper()
	return analyzeFile(t, build(t, rulesSrc, "c", "-O1", "-no-pie", "-fcf-protection=none"), opt)
}

func TestRule1Boundary(t *testing.T) {
	b := rulesBinary(t, Options{})
	f := fn(t, b, "r1_boundary")
	s := b.Check(SiteRequest{Addr: f.Addr + 1})
	wantVerdict(t, s, Refuse)
	if r := reason(t, s, RuleNotBoundary); r.Addr != f.Addr+1 || !strings.Contains(r.Detail, "inside the 5-byte instruction") {
		t.Errorf("reason %v", r)
	}
	wantVerdict(t, entry(t, b, "r1_boundary", SiteRequest{}), Optimize)
}

func TestRule1Disagree(t *testing.T) {
	b := rulesBinary(t, Options{})
	bad := symAddr(t, b, "r1_disagree_bad")
	s := entry(t, b, "r1_disagree", SiteRequest{})
	// The entry itself is fine, but the function does not decode cleanly.
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleDecodeDisagree); r.Addr != bad {
		t.Errorf("disagreement reported at %#x, want %#x", r.Addr, bad)
	}
	// After the bad instruction boundaries are not trusted.
	s = b.Check(SiteRequest{Addr: symAddr(t, b, "r1_disagree_after")})
	wantVerdict(t, s, Refuse)
	reason(t, s, RuleDecodeDisagree)

	bad = symAddr(t, b, "r1_invalid_bad")
	s = entry(t, b, "r1_invalid", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleDecodeError); r.Addr != bad {
		t.Errorf("decode error reported at %#x, want %#x", r.Addr, bad)
	}
	wantVerdict(t, b.Check(SiteRequest{Addr: bad}), Refuse)
}

func TestRule1Endbr(t *testing.T) {
	b := rulesBinary(t, Options{})
	f := fn(t, b, "r1_endbr")
	s := b.Check(SiteRequest{Addr: f.Addr})
	// endbr64 is skipped; vzeroupper (an x86asm length bug x86dec knows)
	// does not spoil the function.
	wantVerdict(t, s, Optimize)
	if s.Addr != f.Addr+4 || s.Offset != 4 || s.Requested != f.Addr {
		t.Errorf("site %#x offset %d requested %#x, want after endbr64 at %#x", s.Addr, s.Offset, s.Requested, f.Addr+4)
	}
	if r := reason(t, s, RuleEndbrSkip); !r.Note {
		t.Errorf("endbr64 skip should be a note: %v", r)
	}
	if s.DCRLen != 7 || len(s.DCR) != 3 { // push %rbp; mov %rsp,%rbp; vzeroupper
		t.Errorf("DCR %v len %d", s.DCR, s.DCRLen)
	}
}

func TestRule2(t *testing.T) {
	b := rulesBinary(t, Options{})
	s := entry(t, b, "r2_short", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleDCRPastJmp); !strings.Contains(r.Detail, "r2_next") {
		t.Errorf("want the next function named: %v", r)
	}

	s = entry(t, b, "r2_padded", SiteRequest{})
	wantVerdict(t, s, Optimize)
	if r := reason(t, s, RulePaddingTail); !r.Note || s.DCRLen != 5 || len(s.DCR) != 2 {
		t.Errorf("padding tail: %v, DCR %v/%d", r, s.DCR, s.DCRLen)
	}

	s = entry(t, b, "r2_targeted", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleDCRPastJmp); !strings.Contains(r.Detail, "branch target") {
		t.Errorf("targeted padding: %v", r)
	}

	s = entry(t, b, "r2_cross", SiteRequest{})
	wantVerdict(t, s, Boost)
	reason(t, s, RuleDCRCrossesFunc)
}

func TestRule3(t *testing.T) {
	b := rulesBinary(t, Options{})
	cases := []struct{ victim, source, mid string }{
		{"r3_loop", "r3_loop_jne", "r3_loop_head"},
		{"r3_victim", "r3_other_jmp", "r3_victim_mid"},
		{"r3_gapvictim", "r3_gap", "r3_gapvictim_mid"},
		{"r3_callvictim", "r3_caller_call", "r3_callvictim_mid"},
	}
	for _, c := range cases {
		s := entry(t, b, c.victim, SiteRequest{NoRedirect: true}) // the kernel's rule 3
		wantVerdict(t, s, Boost)
		r := reason(t, s, RuleJumpIntoDCR)
		if r.Addr != symAddr(t, b, c.source) || !strings.Contains(r.Detail, "targets "+hexs(symAddr(t, b, c.mid))) {
			t.Errorf("%s: reason %v, want source %s targeting %s", c.victim, r, c.source, c.mid)
		}
	}
	for _, c := range cases[1:] { // neither redirected nor grown over
		wantVerdict(t, entry(t, b, c.victim, SiteRequest{}), Boost)
	}
	// a loop back into the region: the region grows over it, to the end of its jne
	s := entry(t, b, "r3_loop", SiteRequest{})
	wantVerdict(t, s, Optimize)
	reason(t, s, RuleDCRGrown)
	if end := symAddr(t, b, "r3_loop_jne") + 2; s.Addr+uint64(s.DCRLen) != end || s.DCR[len(s.DCR)-1].Addr != end-2 {
		t.Errorf("r3_loop: DCR %+v (%d bytes), want it to end with the jne, at %#x", s.DCR, s.DCRLen, end)
	}
	// a jmp rel8 with padding after it is redirected (a jcc rel8, a call and code in no
	// function are not, above)
	s = entry(t, b, "r3_jmpvictim", SiteRequest{})
	wantVerdict(t, s, Optimize)
	want := Redirect{From: symAddr(t, b, "r3_jumper_jmp"), Len: 2, To: symAddr(t, b, "r3_jmpvictim_mid"), Edit: 5}
	if len(s.Redirects) != 1 || s.Redirects[0] != want {
		t.Errorf("r3_jmpvictim: redirects %+v, want %+v", s.Redirects, want)
	}
	reason(t, s, RuleJumpRedirected)
	s = entry(t, b, "r3_jmpvictim", SiteRequest{NoRedirect: true})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleJumpIntoDCR); r.Addr != want.From || len(s.Redirects) != 0 {
		t.Errorf("r3_jmpvictim without redirects: %v, redirects %v", r, s.Redirects)
	}
	s = entry(t, b, "r3_jmpvictim", SiteRequest{OtherProbes: []uint64{symAddr(t, b, "r3_jumper")}})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleJumpIntoDCR); !strings.Contains(r.Detail, "may take its bytes") {
		t.Errorf("r3_jmpvictim with a probe on r3_jumper: %v", r)
	}
	s = entry(t, b, "r3_victim", SiteRequest{})
	if r := reason(t, s, RuleJumpIntoDCR); !strings.Contains(r.Detail, "(in r3_other)") {
		t.Errorf("the source function should be named: %v", r)
	}
	s = entry(t, b, "r3_endbr", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleEndbrInDCR); r.Addr != symAddr(t, b, "r3_endbr_mid") {
		t.Errorf("endbr64 in DCR: %v", r)
	}
	s = entry(t, b, "r3_leavictim", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleAddrTakenInDCR); r.Addr != symAddr(t, b, "r3_leataker_lea") {
		t.Errorf("lea: %v", r)
	}
}

// TestRule3DataWord: a data word holding an address inside one of the region's
// instructions does not block the jump; one holding an instruction start does.
func TestRule3DataWord(t *testing.T) {
	b := rulesBinary(t, Options{})
	s := entry(t, b, "r3_wordvictim", SiteRequest{})
	wantVerdict(t, s, Optimize)
	words := symAddr(t, b, "r3_words")
	var note *Reason
	for i := range s.Reasons {
		if s.Reasons[i].Rule == RuleAddrTakenInDCR && s.Reasons[i].Note {
			note = &s.Reasons[i]
		}
	}
	if note == nil || note.Addr != words || !strings.Contains(note.Detail, "inside the instruction at "+hexs(symAddr(t, b, "r3_wordvictim")+3)) {
		t.Errorf("no note of the word inside an instruction: %+v", s.Reasons)
	}
	s = entry(t, b, "r3_wordvictim2", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleAddrTakenInDCR); r.Addr != words+8 || r.Note {
		t.Errorf("a word at an instruction of the region: %+v", r)
	}
}

func hexs(v uint64) string { return "0x" + strings.TrimLeft(strings.ToLower(uitoa16(v)), "0") }

func uitoa16(v uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
	return string(b[:])
}

func TestRule4(t *testing.T) {
	b := rulesBinary(t, Options{})
	jmp := symAddr(t, b, "r4_unres_jmp")
	s := entry(t, b, "r4_unres", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleIndirectJump); r.Addr != jmp || !strings.Contains(r.Detail, "computed by add") {
		t.Errorf("unresolved: %v", r)
	}
	// A fragment that jumps back into r4_unres may be where the jmp lands.
	s = entry(t, b, "r4_frag", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleIndirectJump); r.Addr != jmp || !strings.Contains(r.Detail, "r4_unres, a fragment of it") {
		t.Errorf("fragment: %v", r)
	}

	for _, name := range []string{"r4_ptr", "r4_got", "r4_arg"} {
		s := entry(t, b, name, SiteRequest{})
		wantVerdict(t, s, Optimize)
		if r := reason(t, s, RulePointerJump); !r.Note {
			t.Errorf("%s: %v", name, r)
		}
	}
	if r := reason(t, entry(t, b, "r4_got", SiteRequest{}), RulePointerJump); !strings.Contains(r.Detail, "tail call through the pointer at "+hexs(symAddr(t, b, "r4_slot"))) {
		t.Errorf("GOT-style tail call: %v", r)
	}
	if r := reason(t, entry(t, b, "r4_arg", SiteRequest{}), RulePointerJump); !strings.Contains(r.Detail, "passed in by the caller") {
		t.Errorf("argument: %v", r)
	}

	// A stack slot is followed to its stores (the push between them moves %rsp), and
	// the stored values are judged as any other.
	s = entry(t, b, "r4_spill", SiteRequest{})
	wantVerdict(t, s, Optimize)
	if r := reason(t, s, RulePointerJump); !strings.Contains(r.Detail, "loaded from memory, kept in a stack slot in between") {
		t.Errorf("spilled pointer: %v", r)
	}
	s = entry(t, b, "r4_spilladd", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleIndirectJump); !strings.Contains(r.Detail, "computed by add") {
		t.Errorf("spilled computed target: %v", r)
	}
	s = entry(t, b, "r4_spillpart", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleIndirectJump); !strings.Contains(r.Detail, "writes part of the stack slot") {
		t.Errorf("partly overwritten slot: %v", r)
	}

	// A table indexed by a copy of the checked register is resolved; not when the
	// checked register changes after the copy.
	s = entry(t, b, "r4_copyidx", SiteRequest{})
	wantVerdict(t, s, Optimize)
	if r := reason(t, s, RuleJumpTable); !strings.Contains(r.Detail, "with 3 int32 entries") {
		t.Errorf("copied index: %v", r)
	}
	s = entry(t, b, "r4_copybad", SiteRequest{})
	wantVerdict(t, s, Boost)
	reason(t, s, RuleIndirectJump)

	// A resolved table whose entry lands inside the entry DCR.
	tjmp := symAddr(t, b, "r4_table_jmp")
	s = entry(t, b, "r4_table", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleTableIntoDCR); r.Addr != tjmp || !strings.Contains(r.Detail, hexs(symAddr(t, b, "r4_table_tgt"))) {
		t.Errorf("table into DCR: %v", r)
	}
	found := false
	for _, ij := range b.IndirectJumps() {
		if ij.Addr == tjmp {
			found = true
			if ij.Class != "jump table" || !strings.Contains(ij.Detail, "with 3 int32 entries relative to "+hexs(symAddr(t, b, "r4_tab"))) {
				t.Errorf("r4_table jmp: %+v", ij)
			}
		}
	}
	if !found {
		t.Error("r4_table's jmp not listed")
	}
}

func TestRule5(t *testing.T) {
	b := rulesBinary(t, Options{})
	s := entry(t, b, "r5_lp", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleLandingPad); r.Addr != symAddr(t, b, "r5_pad") {
		t.Errorf("landing pad: %v", r)
	}
	if b.Stats.LandingPads != 1 {
		t.Errorf("%d landing pads, want 1", b.Stats.LandingPads)
	}
	s = entry(t, b, "r5_badlsda", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleLSDAUnreadable); !strings.Contains(r.Detail, "could not be read") {
		t.Errorf("bad LSDA: %v", r)
	}
	if b.Stats.LSDAErrors != 1 {
		t.Errorf("%d LSDA errors, want 1", b.Stats.LSDAErrors)
	}
}

func TestRule6(t *testing.T) {
	b := rulesBinary(t, Options{})
	cc := symAddr(t, b, "r6_int3_cc")
	s := entry(t, b, "r6_int3", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleInt3InDCR); r.Addr != cc {
		t.Errorf("int3: %v", r)
	}
	s = b.Check(SiteRequest{Addr: cc})
	wantVerdict(t, s, Refuse)
	reason(t, s, RuleExistingInt3)

	f := fn(t, b, "r7_riprel_ok")
	s = b.Check(SiteRequest{Addr: f.Addr, OtherProbes: []uint64{f.Addr + 3}})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleOtherProbe); r.Addr != f.Addr+3 {
		t.Errorf("other probe: %v", r)
	}
	// Another probe at the same address is aggregated, one past the DCR is fine.
	wantVerdict(t, b.Check(SiteRequest{Addr: f.Addr, OtherProbes: []uint64{f.Addr, f.Addr + 6}}), Optimize)
}

func TestRule7(t *testing.T) {
	b := rulesBinary(t, Options{})
	s := entry(t, b, "r7_call_mid", SiteRequest{})
	wantVerdict(t, s, SingleStep) // an indirect call cannot be boosted either
	if r := reason(t, s, RuleCallInDCR); !strings.Contains(r.Detail, "does not end the region") {
		t.Errorf("call mid: %v", r)
	}
	reason(t, s, RuleNotBoostable)

	s = entry(t, b, "r7_call_end", SiteRequest{})
	wantVerdict(t, s, Optimize)
	if r := reason(t, s, RuleCallRelocated); !r.Note || r.Addr != symAddr(t, b, "r7_call_end_call") {
		t.Errorf("call end: %v", r)
	}
	strict := rulesBinary(t, Options{StrictCalls: true})
	s = entry(t, strict, "r7_call_end", SiteRequest{})
	wantVerdict(t, s, Boost)
	reason(t, s, RuleCallInDCR)

	s = entry(t, b, "r7_riprel", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleRIPRelReach); r.Addr != symAddr(t, b, "r7_riprel_lea") {
		t.Errorf("riprel: %v", r)
	}
	wantVerdict(t, b.Check(SiteRequest{Addr: symAddr(t, b, "r7_riprel_lea")}), Refuse)
	s = entry(t, b, "r7_riprel_ok", SiteRequest{})
	wantVerdict(t, s, Optimize)

	for _, c := range []struct{ fn, insn string }{{"r7_io", "r7_io_in"}, {"r7_far", "r7_far_jmp"}} {
		s = entry(t, b, c.fn, SiteRequest{})
		wantVerdict(t, s, Boost)
		if r := reason(t, s, RuleDCRInsnRefused); r.Addr != symAddr(t, b, c.insn) {
			t.Errorf("%s: %v", c.fn, r)
		}
		s = b.Check(SiteRequest{Addr: symAddr(t, b, c.insn)})
		wantVerdict(t, s, Refuse)
		reason(t, s, RuleUprobesRefuses)
	}

	s = entry(t, b, "r7_branch_far", SiteRequest{})
	wantVerdict(t, s, Boost)
	if r := reason(t, s, RuleBranchReach); r.Addr != symAddr(t, b, "r7_branch_far_jmp") {
		t.Errorf("far branch: %v", r)
	}
	// jrcxz in the DCR is allowed: the detour sandwiches it.
	wantVerdict(t, entry(t, b, "r7_jrcxz", SiteRequest{}), Optimize)

	// A detour window out of rel32 reach (an image larger than 2 GiB).
	far := *b
	far.detourLo, far.detourHi = 1<<40, 1<<40+DetourSpan
	s = entry(t, &far, "r7_jrcxz", SiteRequest{})
	wantVerdict(t, s, Boost)
	reason(t, s, RuleDetourReach)
}

func TestDetourWindow(t *testing.T) {
	b := rulesBinary(t, Options{})
	lo, hi := DetourWindow(b.File)
	if lo%4096 != 0 || lo < b.File.ImageEnd() || hi-lo != DetourSpan {
		t.Errorf("window %#x..%#x for image end %#x", lo, hi, b.File.ImageEnd())
	}
	if !fitsRel32(lo, hi, 0x401000) || fitsRel32(lo, hi, lo+1<<31) || fitsRel32(lo, hi, lo-1<<31) {
		t.Error("fitsRel32")
	}
}

func TestRule8PostHandler(t *testing.T) {
	b := rulesBinary(t, Options{})
	s := entry(t, b, "r7_riprel_ok", SiteRequest{NeedPostHandler: true})
	wantVerdict(t, s, SingleStep)
	reason(t, s, RulePostHandler)
}

func TestRule9OriginalBytes(t *testing.T) {
	b := rulesBinary(t, Options{Workers: 1})
	sum := sha256.Sum256(b.File.Data)
	sites := b.EntrySites()
	for i := range sites {
		b.Check(SiteRequest{Addr: sites[i].Addr, OtherProbes: []uint64{sites[i].Addr + 1}, NeedPostHandler: true})
	}
	if sha256.Sum256(b.File.Data) != sum {
		t.Fatal("the analysis changed the file bytes")
	}
	// The same answers with more workers, and after other checks.
	b4 := rulesBinary(t, Options{Workers: 4})
	again := b4.EntrySites()
	for i := range sites {
		if sites[i].String() != again[i].String() {
			t.Errorf("site differs between runs:\n%s\n%s", sites[i].String(), again[i].String())
		}
	}
}

func TestBoostAndSingleStep(t *testing.T) {
	b := rulesBinary(t, Options{})
	f := fn(t, b, "b_pushf")
	s := b.Check(SiteRequest{Addr: f.Addr, OtherProbes: []uint64{f.Addr + 1}})
	wantVerdict(t, s, SingleStep)
	if r := reason(t, s, RuleNotBoostable); !strings.Contains(r.Detail, "pushf") || s.Boostable {
		t.Errorf("pushf: %v", r)
	}
	jne := symAddr(t, b, "b_jcc_jne")
	s = b.Check(SiteRequest{Addr: jne, OtherProbes: []uint64{jne + 2}})
	wantVerdict(t, s, Boost)
	if !s.Emulate || s.Boostable {
		t.Errorf("jcc: emulate %v boostable %v", s.Emulate, s.Boostable)
	}
	reason(t, s, RuleEmulated)
	// A plain instruction is boostable.
	f = fn(t, b, "r3_victim")
	if s := b.Check(SiteRequest{Addr: f.Addr}); !s.Boostable {
		t.Errorf("push %%rbx should be boostable: %s", s.String())
	}
}

func TestSiteRefusals(t *testing.T) {
	b := rulesBinary(t, Options{})
	s := b.Check(SiteRequest{Addr: 0x10})
	wantVerdict(t, s, Refuse)
	reason(t, s, RuleNotCode)
	s = b.Check(SiteRequest{Addr: symAddr(t, b, "r3_gap")})
	wantVerdict(t, s, Refuse)
	reason(t, s, RuleNoFunction)

	f := fn(t, b, "r7_riprel_ok")
	s = b.Check(SiteRequest{Addr: f.Addr + 6, Return: true})
	wantVerdict(t, s, Refuse)
	reason(t, s, RuleRetprobeEntry)
	wantVerdict(t, b.Check(SiteRequest{Addr: f.Addr, Return: true}), Optimize)
	// the process entry point: no return address to hook (a plain probe is fine)
	s = b.Check(SiteRequest{Addr: b.File.Entry, Return: true})
	wantVerdict(t, s, Refuse)
	reason(t, s, RuleRetprobeStart)
	if s := b.Check(SiteRequest{Addr: b.File.Entry}); s.Verdict == Refuse {
		t.Errorf("a probe at the entry point: %s", s.String())
	}
}

// TestEveryRuleFires checks that the tests above cover every blocking rule id.
func TestEveryRuleFires(t *testing.T) {
	b := rulesBinary(t, Options{})
	strict := rulesBinary(t, Options{StrictCalls: true})
	fired := map[string]bool{}
	add := func(s Site) {
		for _, r := range s.Reasons {
			fired[r.Rule] = true
		}
	}
	for _, s := range b.EntrySites() {
		add(s)
	}
	for _, s := range strict.EntrySites() {
		add(s)
	}
	for _, a := range []string{"r1_disagree_after", "r6_int3_cc", "r7_io_in", "r7_riprel_lea", "r3_gap"} {
		add(b.Check(SiteRequest{Addr: symAddr(t, b, a)}))
	}
	f := fn(t, b, "r7_riprel_ok")
	add(b.Check(SiteRequest{Addr: f.Addr, OtherProbes: []uint64{f.Addr + 2}, NeedPostHandler: true}))
	add(b.Check(SiteRequest{Addr: f.Addr + 6, Return: true}))
	add(b.Check(SiteRequest{Addr: b.File.Entry, Return: true}))
	add(b.Check(SiteRequest{Addr: f.Addr + 1}))
	add(b.Check(SiteRequest{Addr: 0x10}))
	add(b.Check(SiteRequest{Addr: symAddr(t, b, "b_jcc_jne"), OtherProbes: []uint64{symAddr(t, b, "b_jcc_jne") + 1}}))
	far := *b
	far.detourLo, far.detourHi = 1<<40, 1<<40+DetourSpan
	add(entry(t, &far, "r7_jrcxz", SiteRequest{}))
	// the C library's own: a static program that spawns and jumps
	lib := staticLibcBinary(t)
	for _, r := range []SiteRequest{{Addr: symAddr(t, lib, "__sigsetjmp"), Return: true},
		{Addr: symAddr(t, lib, "_dl_runtime_resolve_xsavec"), Return: true},
		{Addr: symAddr(t, lib, "__spawni_child")}, {Addr: symAddr(t, lib, "__spawni_child"), Return: true},
		{Addr: symAddr(t, lib, "__longjmp"), Return: true}} {
		add(lib.Check(r))
	}
	v8 := analyzeFile(t, build(t, copiedSrc, "c", "-O1", "-no-pie", "-fcf-protection=none"), Options{})
	add(v8.Check(SiteRequest{Addr: symAddr(t, v8, "Builtins_Add")}))
	skip := map[string]bool{}
	if g := goToolBinary(t); g != nil { // Go's: the go tool's runtime and main
		for _, r := range []SiteRequest{{Addr: symAddr(t, g, "runtime.morestack.abi0")}, {Addr: symAddr(t, g, "main.main")},
			{Addr: symAddr(t, g, "main.main"), Return: true}} {
			add(g.Check(r))
		}
	} else {
		skip[RuleGoNoProbe], skip[RuleGoStackCheck], skip[RuleGoReturn] = true, true, true
	}
	for _, r := range Rules {
		if !fired[r.ID] && !skip[r.ID] {
			t.Errorf("rule %s never fired", r.ID)
		}
	}
	var buf bytes.Buffer
	for id := range fired {
		buf.WriteString(id + " ")
	}
	t.Logf("fired: %s", buf.String())
}

// goToolBinary analyses this machine's go tool, a Go program (nil when there is none).
func goToolBinary(t *testing.T) *Binary {
	t.Helper()
	const goTool = "/usr/local/go/bin/go"
	if _, err := os.Stat(goTool); err != nil {
		return nil
	}
	f, err := elfio.Open(goTool)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Analyze(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !b.IsGo() {
		t.Fatalf("%s is not taken for a Go program", goTool)
	}
	return b
}

// TestGoexitReturnAddress: Go goroutines return to runtime.goexit+1, an address no
// instruction of the binary names, so goexit's entry must never be jump-optimized:
// the do-not-probe list of Go's runtime refuses it, and without the list the
// address-taken rule does.
func TestGoexitReturnAddress(t *testing.T) {
	b := goToolBinary(t)
	if b == nil {
		t.Skip("no Go toolchain binary to analyse")
	}
	fn, ok := b.Funcs.ByName("runtime.goexit.abi0")
	if !ok {
		t.Skip("runtime.goexit.abi0 not in the Go binary")
	}
	s := b.Check(SiteRequest{Addr: fn.Addr})
	if s.Verdict != Refuse || !s.Has(RuleGoNoProbe) {
		t.Errorf("runtime.goexit: %s", s.String())
	}
	b.goinfo.noProbes = nil
	s = b.Check(SiteRequest{Addr: fn.Addr})
	if s.Verdict == Optimize || !s.Has(RuleAddrTakenInDCR) {
		t.Errorf("runtime.goexit without the do-not-probe list: %s", s.String())
	}
}

// staticLibcBinary analyses a static glibc program that uses posix_spawn and setjmp: the
// C library code the return-address and signals-blocked rules are about.
func staticLibcBinary(t *testing.T) *Binary {
	t.Helper()
	path := build(t, `#include <setjmp.h>
#include <spawn.h>
extern char **environ;
jmp_buf jb;
int main(int argc, char **argv) {
	pid_t p;
	if (setjmp(jb)) return 0;
	if (argc > 5) posix_spawn(&p, argv[1], 0, 0, argv, environ);
	longjmp(jb, 1);
}
`, "c", "-O2", "-static")
	return analyzePath(t, path)
}

// analyzePath analyses the binary at path.
func analyzePath(t *testing.T, path string) *Binary {
	t.Helper()
	f, err := elfio.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Analyze(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSignalsBlockedByCode: with the names gone (a stripped static program, as
// libc.so.6 is stripped of start_thread, __clone_internal and __spawni_child), the
// code that runs with every signal blocked is still found, from the inline
// rt_sigprocmask that blocks them all: every function the names mark in the program
// with its symbols (posix_spawn's child, the thread start, the clones and clone3's
// child part) is marked in its stripped copy too, and the C library's allocator and
// string functions, which run with the mask blocked only on error paths, are not.
func TestSignalsBlockedByCode(t *testing.T) {
	path := build(t, `#include <pthread.h>
#include <spawn.h>
extern char **environ;
static void *run(void *a) { return a; }
int main(int argc, char **argv) {
	pid_t p;
	pthread_t th;
	if (argc > 5) posix_spawn(&p, argv[1], 0, 0, argv, environ);
	if (argc > 6) pthread_create(&th, 0, run, 0);
	return 0;
}
`, "c", "-O2", "-static", "-pthread")
	stripped := path + ".stripped"
	if out, err := exec.Command("strip", "-o", stripped, path).CombinedOutput(); err != nil {
		t.Skipf("strip: %v %s", err, out)
	}
	named, bare := analyzePath(t, path), analyzePath(t, stripped)
	blocked := func(b *Binary, addr uint64) string {
		fi, ok := b.startIndex(addr)
		if !ok {
			return ""
		}
		return b.signalsBlocked(fi)
	}
	for _, name := range []string{"__spawni_child", "start_thread", "__clone_internal", "__clone3", "__clone"} {
		fn, ok := named.Funcs.ByName(name)
		if !ok {
			t.Logf("%s: not in this C library", name)
			continue
		}
		for _, fi := range named.insideSymbol(fn.Name, fn.Addr) {
			a := named.Funcs.List[fi].Addr
			if why := blocked(named, a); why == "" {
				t.Errorf("%s at %#x: not marked by its name", name, a)
			}
			if why := blocked(bare, a); why == "" {
				t.Errorf("%s at %#x: not marked in the stripped program", name, a)
			} else {
				t.Logf("%s at %#x: %s", name, a, why)
			}
		}
	}
	for _, name := range []string{"malloc", "free", "memcpy", "strlen", "write", "main"} {
		if fn, ok := named.Funcs.ByName(name); ok {
			if why := blocked(bare, fn.Addr); why != "" {
				t.Errorf("%s is marked in the stripped program: %s", name, why)
			}
		}
	}
}
