/* filterrun: runs src/rt_filter.c on the cases read from stdin and prints 0 or 1 for
 * each (and 'x' for a program kprw_filter_compile refuses); filter_test.go compares them
 * with evfilter.Match. Case: u32 plen, prog, u32 dlen, data, u32 tid, cpu, type,
 * u64 ip, ret_ip, bias, comm[16]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"

static int rd(void *p, size_t n) { return fread(p, 1, n, stdin) == n; }

int main(void)
{
	static u8 prog[1 << 16], data[1 << 16];
	u32 plen, dlen;
	while (rd(&plen, 4)) {
		struct kprw_fenv e;
		char comm[16];
		if (plen > sizeof prog || !rd(prog, plen) || !rd(&dlen, 4) || dlen > sizeof data || !rd(data, dlen) ||
		    !rd(&e.tid, 4) || !rd(&e.cpu, 4) || !rd(&e.type, 4) || !rd(&e.ip, 8) || !rd(&e.ret_ip, 8) ||
		    !rd(&e.bias, 8) || !rd(comm, 16))
			return 2;
		/* the data in a buffer of exactly its size, so reads past it are caught by ASan */
		u8 *d = malloc(dlen ? dlen : 1);
		memcpy(d, data, dlen);
		e.data = d;
		e.dlen = dlen;
		e.comm = comm;
		u32 size = kprw_filter_size(prog, plen);
		struct kprw_fprog *f = malloc(size ? size : 1);
		if (!size || kprw_filter_compile(prog, plen, f))
			putchar('x');
		else
			putchar('0' + kprw_filter_match(f, &e));
		free(f);
		free(d);
	}
	return 0;
}
