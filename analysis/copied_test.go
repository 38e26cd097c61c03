package analysis

import (
	"strings"
	"testing"
)

// copiedSrc mimics V8's embedded builtins: a blob of code starting at
// v8_Default_embedded_blob_code_, its size in v8_Default_embedded_blob_code_size_, and a
// function after it that the program runs in place.
const copiedSrc = `
__asm__(".text\n.globl v8_Default_embedded_blob_code_\n.type v8_Default_embedded_blob_code_,@function\n"
	"v8_Default_embedded_blob_code_:\n.globl Builtins_Add\n.type Builtins_Add,@function\nBuiltins_Add:\n"
	"lea (%rdi,%rsi),%rax\nnop\nnop\nnop\nret\n.size Builtins_Add,.-Builtins_Add\n"
	".globl Builtins_Sub\n.type Builtins_Sub,@function\nBuiltins_Sub:\nmov %rdi,%rax\nsub %rsi,%rax\nnop\nret\n"
	".size Builtins_Sub,.-Builtins_Sub\nblob_end:\n"
	".section .rodata\n.globl v8_Default_embedded_blob_code_size_\nv8_Default_embedded_blob_code_size_:\n.long blob_end - v8_Default_embedded_blob_code_\n.text\n");
long Builtins_Add(long, long);
long Builtins_Sub(long, long);
__attribute__((noinline)) long after(long a) { return a * 3 + 1; }
int main(int argc, char **argv) { (void)argv; return (int)(Builtins_Add(argc, 1) + Builtins_Sub(argc, 1) + after(argc)); }
`

// TestCopiedCode: every site in V8's embedded builtins is refused (copied-code), with
// what the code is; code after the blob is not.
func TestCopiedCode(t *testing.T) {
	b := analyzeFile(t, build(t, copiedSrc, "c", "-O1", "-no-pie", "-fcf-protection=none"), Options{})
	for _, name := range []string{"Builtins_Add", "Builtins_Sub"} {
		for _, ret := range []bool{false, true} {
			s := b.Check(SiteRequest{Addr: fn(t, b, name).Addr, Return: ret})
			wantVerdict(t, s, Refuse)
			if r := reason(t, s, RuleCopiedCode); !strings.Contains(r.Detail, "V8's embedded builtins") {
				t.Errorf("%s: %v", name, r)
			}
		}
	}
	if s := entry(t, b, "after", SiteRequest{}); s.Verdict == Refuse {
		t.Errorf("after the blob: %s", s.String())
	}
}
