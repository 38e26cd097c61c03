package analysis

import "testing"

// stackSwitchSrc: functions that move %rsp to another stack (from a register the caller
// gave, from memory, off another register) and functions that only move it on their own
// stack (an aligned frame left through %rbp or a saved copy, alloca).
const stackSwitchSrc = `
long sw_reg(long), sw_mem(long), sw_lea(long), sw_cmov(long, long), ok_frame(long), ok_saved(long), ok_alloca(long);
__asm__(".text\n"
	".globl sw_reg\n.type sw_reg,@function\nsw_reg:\n  mov %rdi,%rsp\n  mov (%rsp),%rdi\n  hlt\n.size sw_reg,.-sw_reg\n"
	".globl sw_mem\n.type sw_mem,@function\nsw_mem:\n  push %rbx\n  mov 8(%rdi),%rsp\n  ret\n.size sw_mem,.-sw_mem\n"
	".globl sw_lea\n.type sw_lea,@function\nsw_lea:\n  mov %rdi,%rax\n  lea 64(%rax),%rsp\n  ret\n.size sw_lea,.-sw_lea\n"
	".globl sw_cmov\n.type sw_cmov,@function\nsw_cmov:\n  test %rsi,%rsi\n  cmovne %rdi,%rsp\n  ret\n.size sw_cmov,.-sw_cmov\n"
	".globl ok_frame\n.type ok_frame,@function\nok_frame:\n  push %rbp\n  mov %rsp,%rbp\n  and $-32,%rsp\n  sub $64,%rsp\n"
	"  mov %rdi,(%rsp)\n  mov (%rsp),%rax\n  mov %rbp,%rsp\n  pop %rbp\n  ret\n.size ok_frame,.-ok_frame\n"
	".globl ok_saved\n.type ok_saved,@function\nok_saved:\n  push %rbx\n  mov %rsp,%rbx\n  lea -128(%rbx),%rcx\n  and $-64,%rcx\n"
	"  mov %rcx,%rsp\n  mov %rdi,(%rsp)\n  mov (%rsp),%rax\n  mov %rbx,%rsp\n  pop %rbx\n  ret\n.size ok_saved,.-ok_saved\n"
	".globl ok_alloca\n.type ok_alloca,@function\nok_alloca:\n  push %rbp\n  mov %rsp,%rbp\n  sub %rdi,%rsp\n  mov %rdi,%rax\n"
	"  leave\n  ret\n.size ok_alloca,.-ok_alloca\n");
long (*volatile fns[])(long) = {sw_reg, sw_mem, sw_lea, (long (*)(long))sw_cmov, ok_frame, ok_saved, ok_alloca};
int main(int argc, char **argv) { return argc > 5 ? (int)fns[argc](argc) : 0; }
`

// TestStackSwitch: a return probe is refused (retprobe-stack-switch) on a function that
// sets %rsp from something other than the stack pointer, and not on one that only
// aligns, grows or restores its own stack.
func TestStackSwitch(t *testing.T) {
	b := analyzePath(t, build(t, stackSwitchSrc, "c", "-O1"))
	for name, refused := range map[string]bool{"sw_reg": true, "sw_mem": true, "sw_lea": true, "sw_cmov": true,
		"ok_frame": false, "ok_saved": false, "ok_alloca": false} {
		s := b.Check(SiteRequest{Addr: symAddr(t, b, name), Return: true})
		got := false
		for _, r := range s.Reasons {
			if r.Rule == RuleStackSwitch {
				got = true
			}
		}
		if got != refused || (refused && s.Verdict != Refuse) {
			t.Errorf("r:%s: stack switch %v, want %v: %s", name, got, refused, s.String())
		}
	}
}
