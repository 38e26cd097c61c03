#include <stdio.h>
#include <stdlib.h>

/* A plain function with a normal prologue: optimizable at entry. */
__attribute__((noinline)) int plain(int a, int b) {
	volatile int x = a * b;
	return x + a;
}

/* Entry bytes: 3 one-byte-ish instructions; the jne of the loop targets the second
   one, inside the 5-byte region (which grows over the loop: dcr-grown). */
__attribute__((naked, noinline)) int loop_at_entry(int n) {
	__asm__ volatile(
		"xor %eax, %eax\n"      /* 2 bytes */
		"1: add %edi, %eax\n"   /* 2 bytes: branch target inside the DCR */
		"dec %edi\n"            /* 2 bytes */
		"jne 1b\n"
		"ret\n");
}

/* A function too short for a 5-byte jump: xor + ret. */
__attribute__((naked, noinline)) int tiny(void) {
	__asm__ volatile("xor %eax, %eax\nret\n");
}

int main(int argc, char **argv) {
	printf("%d %d %d\n", plain(argc, 3), loop_at_entry(argc + 2), tiny());
	return 0;
}
