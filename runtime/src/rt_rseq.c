/*
 * rt_rseq.c - per-CPU hit counting for count-only detours (src/rseq.S).
 *
 * A locked increment of a shared counter costs ~4.7 ns on some CPUs (AMD Zen 5 here)
 * against ~0.2 ns unlocked; the kernel counts kprobe hits per CPU with preemption
 * disabled instead. User space has restartable sequences for that: glibc (>= 2.35)
 * registers an rseq area for every thread, at one offset from the thread pointer for
 * all of them, and the kernel keeps its cpu_id current and aborts a critical section
 * that a preemption, migration or signal interrupts. So count-only detours, once
 * start-up has found that area and the trace file holds per-CPU shards of the image's
 * hit counters, count with kprewrite_rt_rseq_count (~1 ns) instead of lock incq:
 * exact across threads and fork children (the shards are in the MAP_SHARED trace file,
 * which keeps them on a crash; no two tasks run on one CPU at once).
 *
 * Finding the area: glibc's dynamic linker exports __rseq_offset (the area's offset
 * from the thread pointer) and __rseq_size (0 when not registered); start-up looks them
 * up in the dynamic symbol table of the linker (AT_BASE), then asks the kernel whether
 * that address is really this thread's registration, without side effects: unregistering
 * it with a wrong signature fails with EPERM for the registered area (EINVAL for any
 * other address), and registering it again with RSEQ_SIG fails with EBUSY only when the
 * registration used RSEQ_SIG, which the abort handler needs. Nothing is found, and
 * detours keep lock incq, where no library registered rseq (musl, Go, glibc < 2.35 or
 * GLIBC_TUNABLES=glibc.pthread.rseq=0), in static programs (no dynamic linker; glibc
 * registers the area after this start-up anyway), and on machines with more than
 * KPRW_RSEQ_MAXCPU possible CPUs.
 *
 * Known limits: a thread made by raw clone without CLONE_SETTLS, and a vfork child
 * before its exec (posix_spawn's), read their creator's area (the kernel does not
 * carry a registration into a task sharing the address space), so their count goes to
 * the shard of the CPU the creator last ran on, unprotected; a thread whose registration failed
 * reads cpu_id -1 or -2: their hits go to a shard of their own, without the kernel's
 * protection, so two of them counting the same probe at the same instant can lose one.
 */
#include "rt.h"

#define SYS_rseq 334
#define RSEQ_SIG 0x53053053u
#define RSEQ_FLAG_UNREGISTER 1
#define NOT_OUR_SIG 0x6b707277u /* "kprw": a signature no registration uses */
#define EPERM 1
#define EBUSY 16
#define ARCH_GET_FS 0x1003
#define SYS_arch_prctl 158

struct kprw_rseq_cs {
	u32 version, flags;
	u64 start_ip, post_commit_offset, abort_ip;
};
#define HIDDEN __attribute__((visibility("hidden")))
extern HIDDEN struct kprw_rseq_cs kprw_rseq_cs;
extern HIDDEN char kprw_rseq_start[], kprw_rseq_post[], kprw_rseq_abort[];
HIDDEN u64 *kprewrite_rt_rseq_shardtab[256]; /* rseq.S: a CPU's shard, by the low byte of cpu_id */

/* is_area says whether the rseq_len bytes at a are this thread's registered rseq area,
 * registered with RSEQ_SIG */
static int is_area(uptr a)
{
	static const u32 lens[] = {32, 64, 128, 256};
	for (u32 i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		if (sys4(SYS_rseq, (long)a, lens[i], RSEQ_FLAG_UNREGISTER, NOT_OUR_SIG) != -EPERM)
			continue; /* not the registered area, or not with this length */
		return sys4(SYS_rseq, (long)a, lens[i], 0, RSEQ_SIG) == -EBUSY;
	}
	return 0;
}

/* possible_cpus is 1 + the highest CPU number the kernel may ever run on, from
 * /sys/devices/system/cpu/possible ("0-3", "0,2-5"), or 0 */
static u32 possible_cpus(void)
{
	char buf[128];
	long fd = sys3(SYS_open, (long)"/sys/devices/system/cpu/possible", 0 /* O_RDONLY */, 0);
	if (fd < 0)
		return 0;
	long n = sys3(SYS_read, fd, (long)buf, sizeof buf - 1);
	sys1(SYS_close, fd);
	if (n <= 0)
		return 0;
	u32 max = 0, v = 0;
	int digits = 0;
	for (long i = 0; i < n; i++) {
		char ch = buf[i];
		if (ch >= '0' && ch <= '9') {
			v = v * 10 + (u32)(ch - '0');
			if (v > 100000)
				return 0;
			digits = 1;
		} else {
			if (digits && v > max)
				max = v;
			v = 0;
			digits = 0;
			if (ch != '-' && ch != ',' && ch != '\n')
				return 0;
		}
	}
	if (digits && v > max)
		max = v;
	return max + 1;
}

/* ELF64 dynamic-linking structures, as far as the lookup needs them */
struct e_ehdr {
	u8 ident[16];
	u16 type, machine;
	u32 version;
	u64 entry, phoff, shoff;
	u32 flags;
	u16 ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
};
struct e_phdr {
	u32 type, flags;
	u64 offset, vaddr, paddr, filesz, memsz, align;
};
struct e_dyn {
	s64 tag;
	u64 val;
};
struct e_sym {
	u32 name;
	u8 info, other;
	u16 shndx;
	u64 value, size;
};
#define PT_DYNAMIC 2
#define DT_NULL 0
#define DT_STRTAB 5
#define DT_SYMTAB 6
#define DT_STRSZ 10

/* ld_symbol returns the address of the defined dynamic symbol name of the ELF object
 * loaded at base (the dynamic linker), or 0. Its dynamic section's pointers are
 * absolute once it has relocated itself, link-time values before: both are accepted.
 * The symbols are those from the symbol table to the string table, which follows it in
 * every linker's layout (a count beyond 4096 is not believed). */
static uptr ld_symbol(uptr base, const char *name)
{
	const struct e_ehdr *eh = (const struct e_ehdr *)base;
	if (kprw_strncmp((const char *)eh->ident, "\177ELF", 4) != 0 || eh->phentsize != sizeof(struct e_phdr))
		return 0;
	const struct e_dyn *dyn = NULL;
	for (u32 i = 0; i < eh->phnum; i++) {
		const struct e_phdr *ph = (const struct e_phdr *)(base + eh->phoff) + i;
		if (ph->type == PT_DYNAMIC)
			dyn = (const struct e_dyn *)(base + ph->vaddr);
	}
	if (!dyn)
		return 0;
	uptr symtab = 0, strtab = 0;
	u64 strsz = 0;
	for (u32 i = 0; i < 512 && dyn[i].tag != DT_NULL; i++) {
		if (dyn[i].tag == DT_SYMTAB)
			symtab = dyn[i].val;
		else if (dyn[i].tag == DT_STRTAB)
			strtab = dyn[i].val;
		else if (dyn[i].tag == DT_STRSZ)
			strsz = dyn[i].val;
	}
	if (symtab && symtab < base)
		symtab += base;
	if (strtab && strtab < base)
		strtab += base;
	if (!symtab || !strtab || strtab <= symtab || (strtab - symtab) / sizeof(struct e_sym) > 4096)
		return 0;
	u32 nsym = (u32)((strtab - symtab) / sizeof(struct e_sym));
	for (u32 i = 1; i < nsym; i++) {
		const struct e_sym *sym = (const struct e_sym *)symtab + i;
		if (sym->shndx == 0 || sym->name >= strsz)
			continue;
		if (kprw_strcmp((const char *)(strtab + sym->name), name) == 0)
			return base + sym->value;
	}
	return 0;
}

/* kprw_rseq_probe finds this thread's rseq area (kprw_rt.rseq_off, its offset from the
 * thread pointer) and the number of shards per-CPU counting needs (kprw_rt.rseq_shards:
 * one per possible CPU and one for threads without a registration); both stay 0 when
 * detours must keep lock incq. Start-up, before the trace file is opened. At the
 * image's relocation (early), the thread library has not registered the main thread's
 * area yet (glibc does it after relocating every object): the area is taken on trust
 * until kprw_rseq_verify, at the entry point or DT_INIT. Until then the process is
 * single-threaded, so a count in the shard an unregistered area's cpu_id names is
 * exact. */
void kprw_rseq_probe(int early)
{
	u64 tp = 0;
	if (!kprw_rt.at_base || sys2(SYS_arch_prctl, ARCH_GET_FS, (long)&tp) < 0 || !tp)
		return;
	uptr off_at = ld_symbol(kprw_rt.at_base, "__rseq_offset");
	uptr size_at = ld_symbol(kprw_rt.at_base, "__rseq_size");
	if (!off_at || !size_at || *(const volatile u32 *)size_at == 0)
		return;
	s64 off = *(const volatile s64 *)off_at;
	u32 ncpu = possible_cpus();
	if (off == 0 || ncpu == 0 || ncpu > KPRW_RSEQ_MAXCPU)
		return;
	if (!is_area(tp + (u64)off)) {
		if (!early)
			return;
		kprw_rt.rseq_unverified = 1;
	}
	kprw_rt.rseq_off = off;
	kprw_rt.rseq_shards = ncpu + 1;
}

/* kprewrite_rt_rseq_fix: the rewriter sets it (a word of .data, so that the output
 * carries it) to the link-time vaddr of the image's table of its PIC count-only
 * detours' descriptors (trampolines' InlinePIC form): u64 n, then n times {the
 * descriptor's vaddr (writable), start_ip, post_commit_offset, abort_ip}, as linked.
 * 0: none (an image at fixed addresses has its descriptors in its code). */
__attribute__((visibility("hidden"), section(".data"))) u64 kprewrite_rt_rseq_fix = 0;

/* rseq_fix writes those descriptors with the load bias added: before the detours can
 * enter their restartable sequences (kprewrite_rt_rseq_off is 0 until kprw_rseq_arm) */
static void rseq_fix(void)
{
	if (!kprewrite_rt_rseq_fix)
		return;
	const u64 *t = (const u64 *)RT_ADDR(kprewrite_rt_rseq_fix);
	u64 n = t[0];
	for (u64 i = 0; i < n && i < (1u << 24); i++) {
		const u64 *e = t + 1 + 4 * i;
		if (e[0] & 31)
			continue;
		struct kprw_rseq_cs *d = (struct kprw_rseq_cs *)RT_ADDR(e[0]);
		d->version = 0;
		d->flags = 0;
		d->start_ip = RT_ADDR(e[1]);
		d->post_commit_offset = e[2];
		d->abort_ip = RT_ADDR(e[3]);
	}
}

/* kprw_rseq_arm points the shard table at shards (kprw_rt.rseq_shards of stride bytes,
 * the last for threads without a registration), fills the critical section's
 * descriptor and publishes the area's offset: from now on count-only detours count per
 * CPU. */
void kprw_rseq_arm(u8 *shards, u64 stride)
{
	u32 ncpu = kprw_rt.rseq_shards - 1;
	for (u32 i = 0; i < 256; i++)
		kprewrite_rt_rseq_shardtab[i] = (u64 *)(shards + (u64)(i < ncpu ? i : ncpu) * stride);
	kprw_rseq_cs.version = 0;
	kprw_rseq_cs.flags = 0;
	kprw_rseq_cs.start_ip = (u64)(uptr)kprw_rseq_start;
	kprw_rseq_cs.post_commit_offset = (u64)(kprw_rseq_post - kprw_rseq_start);
	kprw_rseq_cs.abort_ip = (u64)(uptr)kprw_rseq_abort;
	rseq_fix();
	__atomic_store_n(&kprewrite_rt_rseq_off, (u64)kprw_rt.rseq_off, __ATOMIC_RELEASE);
	__atomic_store_n(&kprw_rt.cpu_rseq, (u64)kprw_rt.rseq_off, __ATOMIC_RELEASE);
	kprw_fast_pick();
}

/* kprw_rseq_verify checks, once the thread library has registered the main thread's
 * rseq area, the area kprw_rseq_probe took on trust at relocation; when it is not
 * registered (glibc.pthread.rseq=0, an old kernel), count-only detours and int3 hits
 * go back to the file's counters with lock incq. The counts already in the shards stay
 * there: readers add the shards to the counters. */
void kprw_rseq_verify(void)
{
	if (!kprw_rt.rseq_unverified)
		return;
	kprw_rt.rseq_unverified = 0;
	u64 tp = 0;
	if (sys2(SYS_arch_prctl, ARCH_GET_FS, (long)&tp) >= 0 && tp && is_area(tp + (u64)kprw_rt.rseq_off))
		return;
	__atomic_store_n(&kprw_rt.hits_per_cpu, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&kprewrite_rt_rseq_off, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&kprw_rt.cpu_rseq, 0, __ATOMIC_RELEASE);
	kprw_fast_pick();
}
