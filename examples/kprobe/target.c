/* target.c - the program examples/kprobe probes: handle_request() is called three times,
 * the last time with a NULL name (which it handles, and the probe's pre-handler does not). */
#include <stdio.h>

__attribute__((noinline)) int handle_request(long id, const char *name)
{
	if (!name)
		return -1;
	printf("request %ld: hello, %s\n", id, name);
	return 0;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	handle_request(1, "world");
	handle_request(2, "kprobes");
	int r = handle_request(3, NULL);
	printf("request 3: returned %d\n", r);
	return 0;
}
