/*
 * rt_fetch.c - the fetch-program interpreter (kprobe-event FETCHARGS).
 *
 * The format is internal/eventdef's (see its package documentation); eventdef.Run is
 * the reference interpreter and this one must write the same bytes for the same
 * registers and memory (fetch_test.go checks that). rt_dispatch.c runs a program once,
 * into the thread's scratch buffer (or straight into the record when its size is
 * fixed); without a scratch buffer, twice: once to measure it (strings are read to find
 * their length, nothing is written), then into the space reserved in the trace file,
 * capped at the measured size, so no record-sized buffer is needed on the (possibly
 * small, sigaltstack) signal stack.
 * Memory is read with kprw_read_mode: the fault-catching copy when fast (src/nofault.S),
 * else process_vm_readv on ourselves; either way a bad pointer in a fetch argument
 * stores zeros / a faulted string instead of crashing the program.
 */
#include "rt.h"

#define F_HDR 24
#define F_BLK 6
#define F_MAGIC 0x4b
#define F_VERSION 1
#define F_ENTRYDATA 2
#define PT_REGS_SIZE 168
#define SP_OFF 152

enum {
	OpReg = 0x01, OpStack = 0x02, OpStackP = 0x03, OpImm = 0x04, OpImage = 0x05, OpEData = 0x06,
	OpXmm = 0x07,
	OpDeref = 0x10, OpUDeref = 0x11, OpStRaw = 0x20, OpStMem = 0x21, OpStStr = 0x22,
	OpStStrArr = 0x23, OpStComm = 0x24, OpStData = 0x25, OpStGoStr = 0x26, OpStMemN = 0x27, OpStGoErr = 0x28, OpBitfield = 0x30,
	OpSBitfield = 0x31, /* arithmetic right shift: a signed bitfield */
};

/* OpStMem's last byte (after the user flag's 0 and 1): memory that cannot fault, read
 * with a plain load (eventdef.StMemSafe: a Go function's g through R14, for the
 * goroutine id the rewrite appends to its events' records) */
#define StMemSafe 2

struct fctx {
	const u64 *regs;
	const u8 *edata;
	u32 elen;
	u8 *rec; /* NULL while measuring */
	u32 len;
	u32 recmax; /* the program's limit: decides cuts and faults, as in eventdef */
	u32 cap;    /* bytes of rec: writes past it are dropped (memory changed between passes) */
	const char *comm;
	int fast; /* read with the fault-catching copy */
};

/* at returns where n bytes at record offset off go, or NULL (measuring, or past cap) */
static u8 *at(struct fctx *c, u32 off, u32 n)
{
	if (!c->rec || (u64)off + n > c->cap)
		return NULL;
	return c->rec + off;
}

/* read_xmm returns the low 64 bits of xmm<n>, live: nothing between the probed code and
 * here touches the SSE registers (the SIGTRAP handler loads the interrupted ones) */
static u64 read_xmm(u32 n)
{
	u64 v = 0;
	switch (n) {
#define XMM(k) \
	case k: __asm__ volatile("movq %%xmm" #k ", %0" : "=r"(v)); break;
	XMM(0) XMM(1) XMM(2) XMM(3) XMM(4) XMM(5) XMM(6) XMM(7)
	XMM(8) XMM(9) XMM(10) XMM(11) XMM(12) XMM(13) XMM(14) XMM(15)
#undef XMM
	}
	return v;
}

static u32 le16(const u8 *p) { return (u32)p[0] | (u32)p[1] << 8; }
static u32 le32(const u8 *p) { return le16(p) | le16(p + 2) << 16; }
static u64 le64(const u8 *p) { return (u64)le32(p) | (u64)le32(p + 4) << 32; }
static void put32(u8 *p, u32 v) { p[0] = (u8)v; p[1] = (u8)(v >> 8); p[2] = (u8)(v >> 16); p[3] = (u8)(v >> 24); }

static int rd(const struct fctx *c, void *buf, u64 addr, u32 n)
{
	return kprw_read_mode(buf, (uptr)addr, n, c->fast) == (long)n;
}

static int rd64(const struct fctx *c, u64 addr, u64 *v)
{
	u8 b[8];
	if (!rd(c, b, addr, 8))
		return 0;
	*v = le64(b);
	return 1;
}

static u32 room(struct fctx *c)
{
	return c->recmax > c->len + 1 ? c->recmax - c->len - 1 : 0;
}

/* append n bytes (already at rec+len when src is NULL) plus NUL, cut at recmax */
static u32 put_bytes(struct fctx *c, const u8 *src, u32 n)
{
	u32 off = c->len;
	u32 size = n + 1, space = c->recmax > off ? c->recmax - off : 0;
	if (size > space)
		size = space;
	if (size == 0)
		return off & 0xffff;
	u8 *d = at(c, off, size);
	if (d) {
		if (src)
			kprw_memcpy(d, src, size - 1);
		d[size - 1] = 0;
	}
	c->len += size;
	return size << 16 | (off & 0xffff);
}

/* a NUL-terminated string of at most room() bytes at addr, as strncpy_from_user: a
 * fault anywhere fails it all. Reads never cross a page in one call, so a string that
 * ends before an unmapped page is read. */
static u32 put_user_string(struct fctx *c, u64 addr, int fault)
{
	u32 off = c->len, max = room(c), n = 0;
	u8 tmp[64];
	if (fault)
		return off & 0xffff;
	while (n < max) {
		u64 a = addr + n;
		u32 chunk = max - n;
		u64 page_left = 4096 - (a & 4095);
		if (chunk > sizeof tmp)
			chunk = sizeof tmp;
		if (chunk > page_left)
			chunk = (u32)page_left;
		if (!rd(c, tmp, a, chunk))
			return off & 0xffff;
		u32 i = 0;
		while (i < chunk && tmp[i])
			i++;
		u8 *d = at(c, off + n, i);
		if (d)
			kprw_memcpy(d, tmp, i);
		n += i;
		if (i < chunk)
			break;
	}
	return put_bytes(c, NULL, n);
}

/* slot checks like eventdef's: inside the current record and below recmax */
static int slot_ok(struct fctx *c, u32 dest, u32 size)
{
	u64 end = (u64)dest + size;
	return end <= c->len && end <= c->recmax;
}

static void wr(struct fctx *c, u32 dest, const void *src, u32 n)
{
	u8 *d = at(c, dest, n);
	if (d)
		kprw_memcpy(d, src, n);
}

static int valid_size(u32 s)
{
	return s == 1 || s == 2 || s == 4 || s == 8;
}

/* source runs a block's source and its dereferences from *code (moved past them) into
 * *val; *fault is set when a read faulted. 0: malformed. */
static int source(struct fctx *c, const u8 **code, const u8 *end, u64 *val, int *fault)
{
	if (*code >= end)
		return 0;
	switch ((*code)[0]) {
	case OpReg:
		if (end - *code < 2 || (*code)[1] % 8 || (*code)[1] >= PT_REGS_SIZE)
			return 0;
		*val = c->regs[(*code)[1] / 8];
		*code += 2;
		break;
	case OpXmm:
		if (end - *code < 2 || (*code)[1] >= 16)
			return 0;
		*val = read_xmm((*code)[1]);
		*code += 2;
		break;
	case OpStack:
		if (end - *code < 5)
			return 0;
		if (!rd64(c, c->regs[SP_OFF / 8] + 8 * (u64)le32(*code + 1), val))
			*val = 0;
		*code += 5;
		break;
	case OpStackP:
		*val = c->regs[SP_OFF / 8];
		*code += 1;
		break;
	case OpImm:
	case OpImage:
		if (end - *code < 9)
			return 0;
		*val = le64(*code + 1);
		if ((*code)[0] == OpImage)
			*val += kprw_rt.bias;
		*code += 9;
		break;
	case OpEData: {
		if (end - *code < 5)
			return 0;
		u32 off = le32(*code + 1);
		if ((u64)off + 8 > c->elen)
			return 0;
		*val = le64(c->edata + off);
		*code += 5;
		break;
	}
	default:
		return 0;
	}

	/* dereferences */
	while (*code < end && ((*code)[0] == OpDeref || (*code)[0] == OpUDeref)) {
		if (end - *code < 5)
			return 0;
		s64 off = (int)le32(*code + 1);
		if (!*fault && !rd64(c, *val + (u64)off, val)) {
			*val = 0;
			*fault = 1;
		}
		*code += 5;
	}

	return 1;
}

/* go_string stores a Go string (OpStGoStr at code): min(length, room) bytes at its
 * pointer and a NUL, or a fault; returns the code past it, NULL if malformed. */
__attribute__((noinline)) static const u8 *go_string(struct fctx *c, const u8 *code, const u8 *end, u32 dest, u64 val, int fault)
{
	u8 b[8];
	if (end - code < 6 || code[5] > 1 || !slot_ok(c, dest, 4))
		return NULL;
	s64 off = (int)le32(code + 1);
	u64 ptr = 0, n = 0;
	int mode = code[5];
	code += 6;
	if (mode == 0) {
		fault = fault || !rd64(c, val + (u64)off, &ptr) || !rd64(c, val + (u64)off + 8, &n);
	} else {
		if (off != 0 || !source(c, &code, end, &n, &fault))
			return NULL;
		ptr = val;
	}
	u32 boff = c->len;
	if (fault || (s64)n < 0) {
		put32(b, boff & 0xffff);
		wr(c, dest, b, 4);
		return code;
	}
	u32 len = n < room(c) ? (u32)n : room(c);
	u8 tmp[64];
	for (u32 k = 0; k < len;) { /* as put_user_string: measuring reads too, to fault alike */
		u64 a = ptr + k;
		u32 chunk = len - k;
		if (chunk > sizeof tmp)
			chunk = sizeof tmp;
		if (chunk > 4096 - (a & 4095))
			chunk = (u32)(4096 - (a & 4095));
		if (!rd(c, tmp, a, chunk)) {
			put32(b, boff & 0xffff);
			wr(c, dest, b, 4);
			return code;
		}
		wr(c, boff + k, tmp, chunk);
		k += chunk;
	}
	put32(b, put_bytes(c, NULL, len));
	wr(c, dest, b, 4);
	return code;
}

/* A Go error's message (OpStGoErr, eventdef's goerr.go): cases of GOERR_CASE bytes
 * {u64 type, u8 kind, u64 a, u64 b} say how the dynamic types they name keep their
 * message in memory; the data_loc's bytes are the message, its NUL, a flag (1: read)
 * and the type word. With GOERR_IMAGE the cases' addresses are link-time ones: type
 * words are compared and stored less the load bias. */
#define GOERR_CASE 25
#define GOERR_TRAILER 10
#define GOERR_DEPTH 3
#define GOERR_IMAGE 1
enum { GoErrStr = 1, GoErrPath = 2, GoErrErrno = 3, GoErrWrap = 4 };

struct gomsg {
	u32 start, n, max; /* record offset, bytes so far, limit */
};

/* msg_mem appends the len bytes at addr, cut at the limit; 0 if they fault */
static int msg_mem(struct fctx *c, struct gomsg *m, u64 addr, u64 len)
{
	u32 k = len < (u64)(m->max - m->n) ? (u32)len : m->max - m->n;
	u8 tmp[64];
	for (u32 i = 0; i < k;) {
		u64 a = addr + i;
		u32 chunk = k - i;
		if (chunk > sizeof tmp)
			chunk = sizeof tmp;
		if (chunk > 4096 - (a & 4095))
			chunk = (u32)(4096 - (a & 4095));
		if (!rd(c, tmp, a, chunk))
			return 0;
		wr(c, m->start + m->n + i, tmp, chunk);
		i += chunk;
	}
	m->n += k;
	return 1;
}

static int msg_lit(struct fctx *c, struct gomsg *m, const char *s, u32 len)
{
	u32 k = len < m->max - m->n ? len : m->max - m->n;
	wr(c, m->start + m->n, s, k);
	m->n += k;
	return 1;
}

/* msg_gostr appends the Go string whose {pointer, length} header is at hdr */
static int msg_gostr(struct fctx *c, struct gomsg *m, u64 hdr)
{
	u64 ptr, n;
	if (!rd64(c, hdr, &ptr) || !rd64(c, hdr + 8, &n) || (s64)n < 0)
		return 0;
	return msg_mem(c, m, ptr, n);
}

/* msg_errno appends syscall.Errno's text: its entry of the table of tlen strings at
 * tab, else "errno N" (Errno.Error) */
static int msg_errno(struct fctx *c, struct gomsg *m, u64 data, u64 tab, u64 tlen)
{
	u64 v, n;
	if (!rd64(c, data, &v))
		return 0;
	if ((s64)v >= 0 && v < tlen) {
		if (!rd64(c, tab + 16 * v + 8, &n))
			return 0;
		if (n)
			return msg_gostr(c, m, tab + 16 * v);
	}
	char t[32] = "errno ", d[24];
	u32 k = 0, len = 6;
	u64 u = (s64)v < 0 ? -v : v;
	do
		d[k++] = (char)('0' + u % 10);
	while ((u /= 10));
	if ((s64)v < 0)
		t[len++] = '-';
	while (k)
		t[len++] = d[--k];
	return msg_lit(c, m, t, len);
}

/* go_errmsg appends the message of the error (tw, data) as its case says; 0 when
 * it has none or cannot be read. A PathError's or a SyscallError's message ends
 * with its Err's: a loop, not a recursion, so that the stack's bound stays known. */
static int go_errmsg(struct fctx *c, struct gomsg *m, const u8 *cases, u32 ncase, u64 bias, u64 tw, u64 data)
{
	for (int depth = 0; depth < GOERR_DEPTH; depth++) {
		const u8 *k = NULL;
		for (u32 i = 0; i < ncase && tw; i++)
			if (le64(cases + i * GOERR_CASE) == tw) {
				k = cases + i * GOERR_CASE;
				break;
			}
		if (!k)
			return 0;
		u64 a = le64(k + 9), b = le64(k + 17), tab, s = a, e = b; /* the last string, the inner error */
		switch (k[8]) {
		case GoErrStr:
			return msg_gostr(c, m, data + a);
		case GoErrErrno:
			return msg_errno(c, m, data, a + bias, b);
		case GoErrPath:
			if (!msg_gostr(c, m, data + a) || !msg_lit(c, m, " ", 1))
				return 0;
			s = b;
			e = b + 16;
			/* fall through */
		case GoErrWrap:
			if (!msg_gostr(c, m, data + s) || !msg_lit(c, m, ": ", 2))
				return 0;
			if (!rd64(c, data + e, &tab) || !rd64(c, data + e + 8, &data) || !tab || !rd64(c, tab + 8, &tw))
				return 0;
			if (tw)
				tw -= bias;
			continue;
		}
		return 0;
	}
	return 0;
}

/* go_err stores a Go error (OpStGoErr at code; tw the type word); returns the code
 * past it, NULL if malformed. */
__attribute__((noinline)) static const u8 *go_err(struct fctx *c, const u8 *code, const u8 *end, u32 dest, u64 tw, int fault)
{
	u8 b[GOERR_TRAILER];
	if (end - code < 4 || code[1] > GOERR_IMAGE)
		return NULL;
	u64 bias = code[1] == GOERR_IMAGE ? kprw_rt.bias : 0;
	u32 ncase = le16(code + 2);
	if ((u64)(end - code) < 4 + (u64)ncase * GOERR_CASE)
		return NULL;
	const u8 *cases = code + 4;
	code = cases + ncase * GOERR_CASE;
	u64 data = 0;
	int dfault = 0;
	if (!source(c, &code, end, &data, &dfault) || code != end || !slot_ok(c, dest, 4))
		return NULL;
	if (fault)
		tw = 0;
	if (tw)
		tw -= bias;
	u32 off = c->len, avail = c->recmax > off ? c->recmax - off : 0;
	if (avail < GOERR_TRAILER) {
		put32(b, off & 0xffff);
		wr(c, dest, b, 4);
		return code;
	}
	struct gomsg m = {off, 0, avail - GOERR_TRAILER};
	int ok = !dfault && go_errmsg(c, &m, cases, ncase, bias, tw, data);
	if (!ok)
		m.n = 0;
	b[0] = 0;
	b[1] = (u8)ok;
	for (u32 i = 0; i < 8; i++)
		b[2 + i] = (u8)(tw >> (8 * i));
	wr(c, off + m.n, b, GOERR_TRAILER);
	c->len = off + m.n + GOERR_TRAILER;
	put32(b, (m.n + GOERR_TRAILER) << 16 | (off & 0xffff));
	wr(c, dest, b, 4);
	return code;
}

/* block runs one block at prog[pos]; returns the next position or -1 if malformed */
static long block(struct fctx *c, const u8 *prog, u32 plen, u32 pos)
{
	if ((u64)pos + F_BLK > plen)
		return -1;
	u32 dest = le32(prog + pos);
	u32 n = le16(prog + pos + 4);
	if ((u64)pos + F_BLK + n > plen || n == 0)
		return -1;
	const u8 *code = prog + pos + F_BLK, *end = code + n;
	long next = (long)pos + F_BLK + n;
	u8 b[8];

	if (code[0] == OpStComm) {
		if (n != 1 || !slot_ok(c, dest, 4))
			return -1;
		u32 l = 0;
		while (l < 15 && c->comm[l])
			l++;
		if (l > room(c))
			l = room(c);
		put32(b, put_bytes(c, (const u8 *)c->comm, l));
		wr(c, dest, b, 4);
		return next;
	}
	if (code[0] == OpStData) {
		if (n < 3)
			return -1;
		u32 l = le16(code + 1);
		if (n != 3 + l || !slot_ok(c, dest, 4))
			return -1;
		u32 k = 0;
		while (k < l && code[3 + k])
			k++;
		put32(b, put_bytes(c, code + 3, k));
		wr(c, dest, b, 4);
		return next;
	}

	/* the common argument, a register stored raw (%REG, $argN <= 6, $retval), directly */
	if (n == 4 && code[0] == OpReg && code[2] == OpStRaw && code[1] % 8 == 0 && code[1] < PT_REGS_SIZE &&
	    valid_size(code[3])) {
		if (!slot_ok(c, dest, code[3]))
			return -1;
		u8 *d = at(c, dest, code[3]);
		if (d) {
			u64 v = c->regs[code[1] / 8];
			switch (code[3]) {
			case 8: __builtin_memcpy(d, &v, 8); break;
			case 4: __builtin_memcpy(d, &v, 4); break;
			case 2: __builtin_memcpy(d, &v, 2); break;
			default: d[0] = (u8)v; break;
			}
		}
		return next;
	}

	/* the common memory argument, +OFF(%REG):TYPE, read straight into its slot */
	if (n == 10 && code[0] == OpReg && code[2] == OpStMem && code[1] % 8 == 0 && code[1] < PT_REGS_SIZE &&
	    valid_size(code[7]) && code[8] == 1 && code[9] <= StMemSafe) {
		u32 esize = code[7];
		if (!slot_ok(c, dest, esize))
			return -1;
		u8 *d = at(c, dest, esize);
		if (d) {
			u64 addr = c->regs[code[1] / 8] + (u64)(s64)(int)le32(code + 3);
			long got = code[9] == StMemSafe ? (kprw_load_safe(d, (uptr)addr, esize), (long)esize)
							: kprw_read_mode(d, (uptr)addr, esize, c->fast);
			if (got < (long)esize) /* as copy_from_user: the readable bytes, zero padded */
				kprw_memset(d + (got > 0 ? got : 0), 0, esize - (u32)(got > 0 ? got : 0));
		}
		return next;
	}

	/* source */
	u64 val = 0;
	int fault = 0;
	if (!source(c, &code, end, &val, &fault))
		return -1;

	/* store */
	if (code >= end)
		return -1;
	u32 esize = 0, ebytes = 0;
	switch (code[0]) {
	case OpStRaw:
		if (end - code < 2 || !valid_size(code[1]))
			return -1;
		esize = ebytes = code[1];
		if (!slot_ok(c, dest, esize))
			return -1;
		for (u32 i = 0; i < 8; i++)
			b[i] = fault ? 0 : (u8)(val >> (8 * i));
		wr(c, dest, b, esize);
		code += 2;
		break;
	case OpStMem: {
		if (end - code < 8 || !valid_size(code[5]) || code[6] == 0 || code[7] > StMemSafe)
			return -1;
		s64 off = (int)le32(code + 1);
		u32 cnt = code[6];
		esize = code[5];
		ebytes = esize * cnt;
		if (!slot_ok(c, dest, ebytes))
			return -1;
		for (u32 i = 0; c->rec && i < cnt; i++) {
			/* as copy_from_user, which the kernel stores it with: the bytes before
			 * the first unreadable one, the rest zero */
			uptr src = (uptr)(val + (u64)off + (u64)i * esize);
			long got = fault ? 0 : code[7] == StMemSafe ? (kprw_load_safe(b, src, esize), (long)esize)
								    : kprw_read_mode(b, src, esize, c->fast);
			if (got < (long)esize)
				kprw_memset(b + (got > 0 ? got : 0), 0, esize - (u32)(got > 0 ? got : 0));
			wr(c, dest + i * esize, b, esize);
		}
		code += 8;
		break;
	}
	case OpStStr: {
		if (end - code < 6 || code[5] > 1)
			return -1;
		s64 off = (int)le32(code + 1);
		if (!slot_ok(c, dest, 4))
			return -1;
		put32(b, put_user_string(c, val + (u64)off, fault));
		wr(c, dest, b, 4);
		code += 6;
		break;
	}
	case OpStStrArr: {
		if (end - code < 11 || code[9] == 0 || code[10] > 1)
			return -1;
		s64 poff = (int)le32(code + 1), soff = (int)le32(code + 5);
		u32 cnt = code[9];
		if (!slot_ok(c, dest, 4 * cnt))
			return -1;
		for (u32 i = 0; i < cnt; i++) {
			u64 p = 0;
			int f = fault || !rd64(c, val + (u64)poff + 8ull * i, &p);
			put32(b, put_user_string(c, p + (u64)soff, f));
			wr(c, dest + 4 * i, b, 4);
		}
		code += 11;
		break;
	}
	case OpStGoStr:
		if (!(code = go_string(c, code, end, dest, val, fault)))
			return -1;
		break;
	case OpStGoErr:
		if (!(code = go_err(c, code, end, dest, val, fault)))
			return -1;
		break;
	case OpStMemN: {
		/* a Go slice's first elements: as OpStMem, but zeros past the length n */
		if (end - code < 3 || !valid_size(code[1]) || code[2] == 0)
			return -1;
		esize = code[1];
		u32 cnt = code[2];
		ebytes = esize * cnt;
		if (!slot_ok(c, dest, ebytes))
			return -1;
		u64 n = 0;
		code += 3;
		if (!source(c, &code, end, &n, &fault))
			return -1;
		for (u32 i = 0; c->rec && i < cnt; i++) {
			long got = fault || (s64)n <= (s64)i ? 0 : kprw_read_mode(b, (uptr)(val + (u64)i * esize), esize, c->fast);
			if (got < (long)esize)
				kprw_memset(b + (got > 0 ? got : 0), 0, esize - (u32)(got > 0 ? got : 0));
			wr(c, dest + i * esize, b, esize);
		}
		break;
	}
	default:
		return -1;
	}

	/* bitfield */
	if (code < end && (code[0] == OpBitfield || code[0] == OpSBitfield)) {
		if (end - code != 3 || esize == 0)
			return -1;
		int sext = code[0] == OpSBitfield;
		u32 ls = code[1], rs = code[2];
		if (ls >= 8 * esize || rs >= 8 * esize || rs < ls)
			return -1;
		for (u32 i = 0; i + esize <= ebytes; i += esize) {
			u8 *e = at(c, dest + i, esize);
			if (!e)
				continue;
			u64 v = 0;
			for (u32 k = 0; k < esize; k++)
				v |= (u64)e[k] << (8 * k);
			v <<= ls + (64 - 8 * esize); /* shift within the element's width */
			if (sext)
				v = (u64)((long)v >> (rs + (64 - 8 * esize)));
			else
				v >>= rs + (64 - 8 * esize);
			for (u32 k = 0; k < esize; k++)
				e[k] = (u8)(v >> (8 * k));
		}
		code += 3;
	}
	if (code != end)
		return -1;
	return next;
}

struct fhdr {
	u32 flags, nargs, nentry, fixed, recmax, edata;
};

static int header(const u8 *prog, u32 plen, struct fhdr *h)
{
	if (plen < F_HDR || prog[0] != F_MAGIC || prog[1] != F_VERSION)
		return 0;
	h->flags = prog[2];
	h->nargs = le16(prog + 4);
	h->nentry = le16(prog + 6);
	h->fixed = le32(prog + 8);
	h->recmax = le32(prog + 12);
	h->edata = le32(prog + 16);
	return le32(prog + 20) == plen && h->fixed <= h->recmax && h->recmax <= (1u << 24) &&
	       h->edata <= (1u << 16);
}

/* kprw_fetch_edata_size is the entry data a return probe's instance keeps (0: none). */
u32 kprw_fetch_edata_size(const u8 *prog, u32 plen)
{
	struct fhdr h;
	if (!header(prog, plen, &h) || h.nentry == 0)
		return 0;
	return h.edata;
}

/* kprw_fetch_fixed_size is the record length of a program that writes no variable-length
 * data (no strings: recmax == fixed; 0 when it has no arguments), so the measuring pass
 * can be skipped; -1 otherwise. */
long kprw_fetch_fixed_size(const u8 *prog, u32 plen)
{
	struct fhdr h;
	if (!header(prog, plen, &h) || h.recmax != h.fixed || h.fixed > KPRW_MAX_REC_DATA)
		return -1;
	return h.fixed;
}

/* kprw_fetch_none says whether the program fetches nothing (no argument, no entry
 * block): its record has no data, its plan is one of no ops */
int kprw_fetch_none(const u8 *prog, u32 plen)
{
	struct fhdr h;
	return header(prog, plen, &h) && h.nargs == 0 && h.nentry == 0 && h.recmax == 0;
}

/* kprw_fetch_entry runs the entry blocks into edata (elen = kprw_fetch_edata_size). */
int kprw_fetch_entry(const u8 *prog, u32 plen, const struct pt_regs *regs, u8 *edata, u32 elen, int fast)
{
	struct fhdr h;
	struct fctx c = {(const u64 *)regs, NULL, 0, edata, elen, elen, elen, "", fast};
	if (!header(prog, plen, &h) || h.nentry == 0 || h.edata != elen)
		return -1;
	kprw_memset(edata, 0, elen);
	long pos = F_HDR;
	for (u32 i = 0; i < h.nentry; i++)
		if ((pos = block(&c, prog, plen, (u32)pos)) < 0)
			return -1;
	return 0;
}

/* kprw_fetch_reads_xmm says whether a block of the program reads an SSE register (the
 * SIGTRAP handler then loads the interrupted ones: see rt_trap.c) */
int kprw_fetch_reads_xmm(const u8 *prog, u32 plen)
{
	struct fhdr h;
	if (!header(prog, plen, &h))
		return 0;
	u32 pos = F_HDR;
	for (u32 i = 0; i < h.nentry + h.nargs; i++) {
		if ((u64)pos + F_BLK > plen)
			return 0;
		u32 n = le16(prog + pos + 4);
		if ((u64)pos + F_BLK + n > plen)
			return 0;
		if (n && prog[pos + F_BLK] == OpXmm)
			return 1;
		pos += F_BLK + n;
	}
	return 0;
}

/* kprw_fetch_run runs the argument blocks. out == NULL measures. The record is limited
 * to min(program recmax, KPRW_MAX_REC_DATA) and written into out[0, cap). Returns its
 * length (at most cap when writing), or -1 for a malformed program. fast: read with the
 * fault-catching copy (the caller checked kprw_fast_ok). */
long kprw_fetch_run(const u8 *prog, u32 plen, const struct pt_regs *regs, const u8 *edata, u32 elen,
		    const char *comm, u8 *out, u32 cap, int fast)
{
	struct fhdr h;
	if (!header(prog, plen, &h))
		return -1;
	u32 lim = h.recmax < KPRW_MAX_REC_DATA ? h.recmax : KPRW_MAX_REC_DATA;
	struct fctx c = {(const u64 *)regs, edata, elen, out, h.fixed, lim, out ? cap : 0, comm, fast};
	if (h.fixed > c.recmax || (out && h.fixed > cap))
		return -1;
	if (out)
		kprw_memset(out, 0, h.fixed);
	u32 pos = F_HDR;
	for (u32 i = 0; i < h.nentry; i++) {
		if ((u64)pos + F_BLK > plen)
			return -1;
		pos += F_BLK + le16(prog + pos + 4);
	}
	for (u32 i = 0; i < h.nargs; i++) {
		long p = block(&c, prog, plen, pos);
		if (p < 0)
			return -1;
		pos = (u32)p;
	}
	if (pos != plen)
		return -1;
	return out && c.len > cap ? cap : c.len;
}

/* kprw_fetch_plan compiles a program whose arguments are all a register stored raw
 * (%REG, $argN, $retval) or a 1-8 byte read at +OFF(%REG), the common forms, into a
 * plan that kprw_fetch_plan_run runs without decoding the program each time: the same
 * bytes as kprw_fetch_run into a record of the fixed size (fetchrun.c checks it on
 * every test vector). 0: the program needs the interpreter. */
int kprw_fetch_plan(const u8 *prog, u32 plen, struct kprw_fplan *pl)
{
	struct fhdr h;
	if (!header(prog, plen, &h) || h.nentry != 0 || h.recmax != h.fixed || h.fixed > KPRW_MAX_REC_DATA ||
	    h.nargs > KPRW_PLAN_MAX)
		return 0;
	u32 pos = F_HDR;
	pl->n = 0;
	pl->fixed = h.fixed;
	for (u32 i = 0; i < h.nargs; i++) {
		if ((u64)pos + F_BLK > plen)
			return 0;
		u32 dest = le32(prog + pos), n = le16(prog + pos + 4);
		const u8 *code = prog + pos + F_BLK;
		if ((u64)pos + F_BLK + n > plen || n < 4 || code[0] != OpReg || code[1] % 8 || code[1] >= PT_REGS_SIZE)
			return 0;
		struct kprw_fplan_op *op = &pl->op[pl->n++];
		op->reg = code[1] / 8;
		op->dest = dest;
		if (n == 4 && code[2] == OpStRaw && valid_size(code[3])) {
			op->mem = 0;
			op->size = code[3];
			op->off = 0;
		} else if (n == 10 && code[2] == OpStMem && valid_size(code[7]) && code[8] == 1 && code[9] <= StMemSafe) {
			op->mem = code[9] == StMemSafe ? 2 : 1;
			op->size = code[7];
			op->off = (int)le32(code + 3);
		} else {
			return 0;
		}
		if ((u64)dest + op->size > h.fixed)
			return 0;
		pos += F_BLK + n;
	}
	return pos == plen;
}

void kprw_fetch_plan_run(const struct kprw_fplan *pl, const struct pt_regs *regs, u8 *out, int fast)
{
	kprw_memset(out, 0, pl->fixed);
	kprw_fetch_plan_into(pl, regs, out, fast);
}
