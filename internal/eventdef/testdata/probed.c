/* The program the trace oracle test probes: target() takes known values,
 * prints its registers, stack and the memory its arguments point to, so
 * the test can rebuild the machine state the kernel's probes saw. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct S {
	int a;
	unsigned b : 4, c : 5, pad : 23;
	char name[8];
	const char *strs[3];
	long arr[3];
	unsigned char bytes[4];
	short sh[2];
	struct S *self;
};
_Static_assert(offsetof(struct S, name) == 8, "layout");
_Static_assert(offsetof(struct S, strs) == 16, "layout");
_Static_assert(offsetof(struct S, arr) == 40, "layout");
_Static_assert(offsetof(struct S, bytes) == 64, "layout");
_Static_assert(offsetof(struct S, sh) == 68, "layout");
_Static_assert(offsetof(struct S, self) == 72, "layout");

struct S gs = {-5, 9, 17, 0x12345, "abc\x01\t\"", {"one", "", "three"}, {1, -2, 3}, {0, 'A', 0xff, '\n'}, {-300, 7}, &gs};
long gv = 0x1122334455667788;
const char *hello = "hello\nworld";

static void dump(const void *p, size_t n)
{
	printf("MEM %lx ", (unsigned long)(uintptr_t)p);
	for (size_t i = 0; i < n; i++)
		printf("%02x", ((const unsigned char *)p)[i]);
	printf("\n");
}

__attribute__((noinline)) long target(long a, long b, const char *s, struct S *p, unsigned long c, long d, long e, long f)
{
	/* With a frame pointer, rbp = entry rsp - 8. */
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0) + 8;
	printf("HIT ip=%lx di=%lx si=%lx dx=%lx cx=%lx r8=%lx r9=%lx sp=%lx ret=%lx\n",
	       (unsigned long)(uintptr_t)target, (unsigned long)a, (unsigned long)b,
	       (unsigned long)(uintptr_t)s, (unsigned long)(uintptr_t)p, c, (unsigned long)d,
	       (unsigned long)sp, (unsigned long)(uintptr_t)__builtin_return_address(0));
	dump((void *)sp, 64);
	return a * 3 + b + e - f;
}

int main(void)
{
	dump(&gs, sizeof gs);
	dump(&gv, sizeof gv);
	dump(hello, strlen(hello) + 1);
	for (int i = 0; i < 3; i++)
		dump(gs.strs[i], strlen(gs.strs[i]) + 1);
	long r = target(-1, -2, hello, &gs, 0x80, 0x7fff, 77, 88);
	printf("RET %lx\n", (unsigned long)r);
	r = target(0x123456789abcdef0, 2147483647, 0, (struct S *)8, 'z', -1, -3, 4);
	printf("RET %lx\n", (unsigned long)r);
	return 0;
}
