/* fetchrun.c - runs the runtime's fetch-program interpreter on one test vector
 * (fetch_test.go compares its output with eventdef.Run). No libc headers: rt.h's
 * raw system calls do the I/O. Input file (argv[1]):
 *   u64 base, u64 size, size bytes of memory (mapped at base; the page after is not)
 *   u64 regs[21], char comm[16], u64 bias, u32 plen, prog[plen]
 * Output: u32 elen, entry data, i64 record length (-1: malformed), record. */
#include "rt.h"

struct kprw_rt kprw_rt;
struct kprw_stats kprewrite_rt_stats;

static u8 in[1 << 20], out[1 << 16], rec[KPRW_MAX_REC_DATA], ed[1 << 16];

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	long fd = sys3(SYS_open, (long)argv[1], 0, 0);
	long n = 0, r;
	while ((r = sys3(SYS_read, fd, (long)(in + n), (long)(sizeof in - (unsigned long)n))) > 0)
		n += r;
	u8 *p = in;
	u64 base = *(u64 *)p, size = *(u64 *)(p + 8);
	p += 16;
	long m = sys6(SYS_mmap, (long)base, (long)size, 3, 0x22 | 0x100000 /* FIXED_NOREPLACE */, -1, 0);
	if (m != (long)base)
		return 3;
	kprw_memcpy((void *)base, p, size);
	p += size;
	struct pt_regs regs;
	kprw_memcpy(&regs, p, sizeof regs);
	p += sizeof regs;
	const char *comm = (const char *)p;
	p += 16;
	kprw_rt.bias = *(u64 *)p;
	p += 8;
	u32 plen = *(u32 *)p;
	p += 4;
	u32 elen = kprw_fetch_edata_size(p, plen), o = 0;
	if (elen && kprw_fetch_entry(p, plen, &regs, ed, elen) < 0)
		elen = 0xffffffff;
	kprw_memcpy(out + o, &elen, 4);
	o += 4;
	if (elen != 0xffffffff) {
		kprw_memcpy(out + o, ed, elen);
		o += elen;
	}
	long len = kprw_fetch_run(p, plen, &regs, ed, elen == 0xffffffff ? 0 : elen, comm, NULL, KPRW_MAX_REC_DATA);
	if (len >= 0) {
		long len2 = kprw_fetch_run(p, plen, &regs, ed, elen == 0xffffffff ? 0 : elen, comm, rec, (u32)len);
		if (len2 != len)
			return 4;
	}
	kprw_memcpy(out + o, &len, 8);
	o += 8;
	if (len > 0) {
		kprw_memcpy(out + o, rec, (unsigned long)len);
		o += (u32)len;
	}
	sys3(SYS_write, 1, (long)out, o);
	return 0;
}
