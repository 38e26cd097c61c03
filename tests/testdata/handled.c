/*
 * handled.c - the program handlers_test.go rewrites with C handlers (testdata/handlers.c)
 * and runs in every probe mode. The probed functions are assembly so that their first
 * instructions are known: add2 and sub2 start with a 3-byte mov then a 3-byte add/sub
 * (jump-optimizable: a 6-byte DCR), sum is recursive and starts with push/push/mov
 * (5 bytes). The handlers read and write hmode and hseen, program variables they name
 * with KPREWRITE_PROGRAM_SYMBOL; argv[1] picks the workload.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hmode;      /* what the handlers do (handlers.c: enum mode) */
long hseen[8];  /* what they saw */

long add2(long a, long b), sub2(long a, long b), alt(long a, long b), sum(long n);

__asm__(".text\n"
	".globl add2\n.type add2,@function\nadd2:\n"
	"  mov %rdi, %rax\n  add %rsi, %rax\n  ret\n.size add2,.-add2\n"
	".globl sub2\n.type sub2,@function\nsub2:\n"
	"  mov %rdi, %rax\n  sub %rsi, %rax\n  ret\n.size sub2,.-sub2\n"
	".globl alt\n.type alt,@function\nalt:\n"
	"  mov $-7, %rax\n  ret\n.size alt,.-alt\n"
	".globl sum\n.type sum,@function\nsum:\n"
	"  push %rbx\n  push %rbp\n  mov %rdi, %rbx\n"
	"  test %rdi, %rdi\n  jz 1f\n  lea -1(%rdi), %rdi\n  call sum\n  add %rbx, %rax\n"
	"  pop %rbp\n  pop %rbx\n  ret\n"
	"1:  xor %eax, %eax\n  pop %rbp\n  pop %rbx\n  ret\n.size sum,.-sum\n");

static void run(const char *label, int mode)
{
	hmode = mode;
	long a = add2(10, 3), s = sub2(10, 3);
	hmode = 0;
	printf("%s add=%ld sub=%ld seen=%ld,%ld,%ld\n", label, a, s, hseen[0], hseen[1], hseen[2]);
	memset(hseen, 0, sizeof hseen);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *w = argc > 1 ? argv[1] : "all";
	if (!strcmp(w, "all")) {
		run("observe", 0);  /* handlers see di, si and ip */
		run("change", 1);   /* pre handlers set si = 100 */
		run("redirect", 2); /* sub2's pre handler resumes at alt() */
		run("reenter", 3);  /* sub2's pre handler calls add2(): that hit is missed */
		run("disable", 4);  /* sub2's pre handler disables the add2 probe */
		run("disabled", 0);
		run("enable", 5);   /* ... and enables it again */
		run("enabled", 0);
		printf("sum6=%ld\n", sum(6));   /* 7 frames, maxactive 4: 3 missed */
		hmode = 6;                      /* the return handler injects 1000 + n */
		printf("inject=%ld\n", sum(6));
		hmode = 0;
		printf("sum2=%ld\n", sum(2));
		return 0;
	}
	if (!strcmp(w, "fault")) {
		hmode = 7; /* add2's pre handler faults; its fault_handler reports it */
		long a = add2(1, 2);
		hmode = 0;
		printf("fault add=%ld again=%ld\n", a, add2(2, 2));
		return 0;
	}
	return 2;
}
