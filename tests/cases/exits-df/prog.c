#include <stdio.h>
__asm__(".text\n.globl setdf\n.type setdf,@function\nsetdf:\n.cfi_startproc\n std\n movl $7,%eax\n ret\n"
	".cfi_endproc\n.size setdf,.-setdf\n.p2align 4\n");
extern int setdf(void);
int main(void) {
	unsigned long f;
	int r = setdf();
	__asm__ volatile("pushfq; popq %0; cld" : "=r"(f));
	printf("ret=%d df=%lu\n", r, (f >> 10) & 1);
	return 0;
}
