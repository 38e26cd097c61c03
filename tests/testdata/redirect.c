/* Jumps into the first bytes of other functions, as glibc's mempcpy jumps to
   memmove+3: each entry of cpy, cpy32 and cpycc is reached at +3 by a jump from the
   function before it (a jmp rel8 followed by padding, a jmp rel32, a jcc rel32); spin
   loops back to its own +3 with a jcc rel8, which cannot be redirected (its region is
   grown over the loop instead), and again loops back to its own entry, where a probe
   is hit on every turn. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__asm__(
	".text\n"
	".p2align 4\n"
	".globl pcpy\n.type pcpy,@function\n"
	"pcpy:\n"
	"	mov %rdi,%rax\n"
	"	add %rdx,%rax\n"
	"	jmp cpy_body\n"
	"	.p2align 4\n"
	".size pcpy,.-pcpy\n"
	".globl cpy\n.type cpy,@function\n"
	"cpy:\n"
	"	mov %rdi,%rax\n"
	"cpy_body:\n"
	"	xor %ecx,%ecx\n"
	"1:	cmp %rdx,%rcx\n"
	"	jae 2f\n"
	"	movzbl (%rsi,%rcx),%r8d\n"
	"	mov %r8b,(%rdi,%rcx)\n"
	"	inc %rcx\n"
	"	jmp 1b\n"
	"2:	ret\n"
	".size cpy,.-cpy\n"
	".p2align 4\n"
	".globl pcpy32\n.type pcpy32,@function\n"
	"pcpy32:\n"
	"	mov %rdi,%rax\n"
	"	add %rdx,%rax\n"
	"	{disp32} jmp cpy32_body\n"
	"	.p2align 4\n"
	".size pcpy32,.-pcpy32\n"
	".globl cpy32\n.type cpy32,@function\n"
	"cpy32:\n"
	"	mov %rdi,%rax\n"
	"cpy32_body:\n"
	"	xor %ecx,%ecx\n"
	"1:	cmp %rdx,%rcx\n"
	"	jae 2f\n"
	"	movzbl (%rsi,%rcx),%r8d\n"
	"	mov %r8b,(%rdi,%rcx)\n"
	"	inc %rcx\n"
	"	jmp 1b\n"
	"2:	ret\n"
	".size cpy32,.-cpy32\n"
	".p2align 4\n"
	".globl maybecpy\n.type maybecpy,@function\n"
	"maybecpy:\n" /* copies when n is odd (through cpycc+3), else returns 0 */
	"	mov %rdi,%rax\n"
	"	test $1,%dl\n"
	"	{disp32} jnz cpycc_body\n"
	"	xor %eax,%eax\n"
	"	ret\n"
	".size maybecpy,.-maybecpy\n"
	".p2align 4\n"
	".globl cpycc\n.type cpycc,@function\n"
	"cpycc:\n"
	"	mov %rdi,%rax\n"
	"cpycc_body:\n"
	"	xor %ecx,%ecx\n"
	"1:	cmp %rdx,%rcx\n"
	"	jae 2f\n"
	"	movzbl (%rsi,%rcx),%r8d\n"
	"	mov %r8b,(%rdi,%rcx)\n"
	"	inc %rcx\n"
	"	jmp 1b\n"
	"2:	ret\n"
	".size cpycc,.-cpycc\n"
	".p2align 4\n"
	".globl spin\n.type spin,@function\n"
	"spin:\n" /* returns its argument after as many turns */
	"	mov %rdi,%rcx\n"
	"1:	dec %rcx\n"
	"	jnz 1b\n"
	"	mov %rdi,%rax\n"
	"	ret\n"
	".size spin,.-spin\n"
	".p2align 4\n"
	".globl again\n.type again,@function\n"
	"again:\n" /* n >= 1 turns back to its entry */
	"	dec %rdi\n"
	"	jnz again\n"
	"	ret\n"
	".size again,.-again\n");

char *pcpy(char *d, const char *s, size_t n);
char *cpy(char *d, const char *s, size_t n);
char *pcpy32(char *d, const char *s, size_t n);
char *cpy32(char *d, const char *s, size_t n);
char *maybecpy(char *d, const char *s, size_t n);
char *cpycc(char *d, const char *s, size_t n);
long spin(long n); /* n >= 1 */
void again(long n); /* n >= 1 */

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 10;
	const char *text = "the quick brown fox jumps over the lazy dog";
	char buf[64];
	unsigned long sum = 0, calls[7] = {0}, turns = 0;
	for (int r = 0; r < rounds; r++) {
		size_t n = r % 40 + 1;
		memset(buf, 0, sizeof buf);
		sum += cpy(buf, text, n) == buf, calls[0]++;
		sum += buf[n - 1];
		sum += pcpy(buf, text + 1, n) == buf + n, calls[1]++;
		sum += buf[0];
		sum += cpy32(buf, text + 2, n) == buf, calls[2]++;
		sum += pcpy32(buf, text + 3, n) == buf + n, calls[3]++;
		sum += buf[n / 2];
		char *m = maybecpy(buf, text + 4, n);
		calls[4]++;
		sum += m ? (m == buf) + buf[0] : 7;
		sum += cpycc(buf, text + 5, n) == buf, calls[5]++;
		sum += spin(n), calls[6]++;
		again(n), turns += n;
	}
	printf("sum %lu\n", sum);
	printf("calls %lu %lu %lu %lu %lu %lu %lu\n", calls[0], calls[1], calls[2], calls[3], calls[4], calls[5], calls[6]);
	printf("turns %lu\n", turns);
	return 0;
}
