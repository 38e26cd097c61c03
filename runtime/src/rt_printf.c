/*
 * rt_printf.c - formatted output for C handlers: vsnprintf (the C99 conversions on
 * integers, strings and pointers, and the kernel's rule that %p followed by letters is
 * one conversion: %pS, %px ... print the pointer, as 16 hex digits without 0x like the
 * kernel's %px), printk to stderr, trace_printk into
 * the trace file. No floating point (handlers are built -mgeneral-regs-only).
 */
#define KPRW_RUNTIME_INTERNAL
#include "kprewrite.h"
#include "rt.h"

struct out {
	char *buf;
	size_t size;
	size_t n; /* what would have been written */
};

static void put(struct out *o, char ch)
{
	if (o->n + 1 < o->size)
		o->buf[o->n] = ch;
	o->n++;
}

static void pad(struct out *o, char ch, int n)
{
	while (n-- > 0)
		put(o, ch);
}

enum { F_LEFT = 1, F_PLUS = 2, F_SPACE = 4, F_ZERO = 8, F_ALT = 16, F_UPPER = 32 };

static void number(struct out *o, unsigned long long v, int neg, unsigned base, int flags, int width, int prec)
{
	char digits[24];
	int nd = 0;
	const char *set = (flags & F_UPPER) ? "0123456789ABCDEF" : "0123456789abcdef";
	do {
		digits[nd++] = set[v % base];
		v /= base;
	} while (v && nd < (int)sizeof digits);
	if (prec == 0 && nd == 1 && digits[0] == '0')
		nd = 0; /* "%.0d" of 0 prints nothing */
	char prefix[3];
	int np = 0;
	if (neg)
		prefix[np++] = '-';
	else if (flags & F_PLUS)
		prefix[np++] = '+';
	else if (flags & F_SPACE)
		prefix[np++] = ' ';
	if ((flags & F_ALT) && base == 16 && nd > 0) {
		prefix[np++] = '0';
		prefix[np++] = (flags & F_UPPER) ? 'X' : 'x';
	} else if ((flags & F_ALT) && base == 8 && (prec <= nd)) {
		prefix[np++] = '0';
	}
	int zeros = prec > nd ? prec - nd : 0;
	int len = np + zeros + nd;
	if (!(flags & F_LEFT) && !((flags & F_ZERO) && prec < 0))
		pad(o, ' ', width - len);
	for (int k = 0; k < np; k++)
		put(o, prefix[k]);
	if (!(flags & F_LEFT) && (flags & F_ZERO) && prec < 0)
		pad(o, '0', width - len);
	pad(o, '0', zeros);
	while (nd > 0)
		put(o, digits[--nd]);
	if (flags & F_LEFT)
		pad(o, ' ', width - len);
}

static void string(struct out *o, const char *s, int flags, int width, int prec)
{
	if (!s)
		s = "(null)";
	int len = 0;
	while ((prec < 0 || len < prec) && s[len])
		len++;
	if (!(flags & F_LEFT))
		pad(o, ' ', width - len);
	for (int k = 0; k < len; k++)
		put(o, s[k]);
	if (flags & F_LEFT)
		pad(o, ' ', width - len);
}

__attribute__((visibility("hidden"))) int kprewrite_vsnprintf(char *buf, size_t size, const char *fmt,
							       __builtin_va_list ap)
{
	struct out o = {buf, size, 0};
	while (*fmt) {
		if (*fmt != '%') {
			put(&o, *fmt++);
			continue;
		}
		const char *start = fmt++;
		int flags = 0, width = -1, prec = -1;
		for (;; fmt++) {
			if (*fmt == '-')
				flags |= F_LEFT;
			else if (*fmt == '+')
				flags |= F_PLUS;
			else if (*fmt == ' ')
				flags |= F_SPACE;
			else if (*fmt == '0')
				flags |= F_ZERO;
			else if (*fmt == '#')
				flags |= F_ALT;
			else
				break;
		}
		if (*fmt == '*') {
			width = __builtin_va_arg(ap, int);
			if (width < 0) {
				flags |= F_LEFT;
				width = -width;
			}
			fmt++;
		} else {
			for (width = 0; *fmt >= '0' && *fmt <= '9'; fmt++)
				width = width * 10 + (*fmt - '0');
		}
		if (*fmt == '.') {
			fmt++;
			if (*fmt == '*') {
				prec = __builtin_va_arg(ap, int);
				fmt++;
			} else {
				for (prec = 0; *fmt >= '0' && *fmt <= '9'; fmt++)
					prec = prec * 10 + (*fmt - '0');
			}
		}
		int len = 0; /* -2 hh, -1 h, 0 int, 1 long */
		for (;; fmt++) {
			if (*fmt == 'h')
				len--;
			else if (*fmt == 'l' || *fmt == 'z' || *fmt == 't' || *fmt == 'j' || *fmt == 'q' || *fmt == 'L')
				len = 1;
			else
				break;
		}
		char conv = *fmt;
		if (conv)
			fmt++;
		switch (conv) {
		case 'd':
		case 'i': {
			long long v = len > 0 ? __builtin_va_arg(ap, long) : __builtin_va_arg(ap, int);
			if (len == -1)
				v = (short)v;
			else if (len <= -2)
				v = (signed char)v;
			number(&o, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, v < 0, 10, flags, width, prec);
			break;
		}
		case 'u':
		case 'x':
		case 'X':
		case 'o': {
			unsigned long long v = len > 0 ? __builtin_va_arg(ap, unsigned long) : __builtin_va_arg(ap, unsigned int);
			if (len == -1)
				v = (unsigned short)v;
			else if (len <= -2)
				v = (unsigned char)v;
			unsigned base = conv == 'u' ? 10 : conv == 'o' ? 8 : 16;
			number(&o, v, 0, base, (flags & ~(F_PLUS | F_SPACE)) | (conv == 'X' ? F_UPPER : 0), width, prec);
			break;
		}
		case 'c': {
			char ch = (char)__builtin_va_arg(ap, int);
			if (!(flags & F_LEFT))
				pad(&o, ' ', width - 1);
			put(&o, ch);
			if (flags & F_LEFT)
				pad(&o, ' ', width - 1);
			break;
		}
		case 's':
			string(&o, __builtin_va_arg(ap, const char *), flags, width, prec);
			break;
		case 'p': {
			void *p = __builtin_va_arg(ap, void *);
			/* the kernel's extensions (%pS, %px, %pK ...) are one conversion: the pointer */
			while ((*fmt >= 'a' && *fmt <= 'z') || (*fmt >= 'A' && *fmt <= 'Z') || (*fmt >= '0' && *fmt <= '9'))
				fmt++;
			/* as the kernel prints it: 16 hex digits, no 0x (samples write "0x%p") */
			if (!p)
				string(&o, "(null)", flags, width, -1);
			else
				number(&o, (unsigned long)p, 0, 16, (flags & F_LEFT) | F_ZERO, width > 0 ? width : 16, -1);
			break;
		}
		case '%':
			put(&o, '%');
			break;
		case 'n':
			(void)__builtin_va_arg(ap, void *);
			break;
		default:
			/* floating point and unknown conversions are printed as written */
			for (; start < fmt; start++)
				put(&o, *start);
			break;
		}
	}
	if (size > 0)
		buf[o.n < size ? o.n : size - 1] = 0;
	return o.n > 0x7fffffff ? 0x7fffffff : (int)o.n;
}

__attribute__((visibility("hidden"))) int kprewrite_snprintf(char *buf, size_t size, const char *fmt, ...)
{
	__builtin_va_list ap;
	__builtin_va_start(ap, fmt);
	int n = kprewrite_vsnprintf(buf, size, fmt, ap);
	__builtin_va_end(ap);
	return n;
}

/* line formats one printk/trace_printk line: the text without a leading KERN_* level, and
 * with "...\n" in place of what did not fit when it was cut. Returns its length. */
static u32 line(char *buf, u32 size, const char *fmt, __builtin_va_list ap, const char **text)
{
	int n = kprewrite_vsnprintf(buf, size, fmt, ap);
	u32 len = (u32)n < size ? (u32)n : size - 1;
	if ((u32)n >= size && size > 4) {
		buf[size - 5] = '.';
		buf[size - 4] = '.';
		buf[size - 3] = '.';
		buf[size - 2] = '\n';
	}
	*text = buf;
	while (len >= 2 && (*text)[0] == '\001' && (*text)[1]) { /* KERN_SOH + level */
		*text += 2;
		len -= 2;
	}
	return len;
}

__attribute__((visibility("hidden"))) int kprewrite_printk(const char *fmt, ...)
{
	char buf[KPRW_PRINTK_MAX];
	const char *text;
	__builtin_va_list ap;
	__builtin_va_start(ap, fmt);
	u32 len = line(buf, sizeof buf, fmt, ap, &text);
	__builtin_va_end(ap);
	long r = kprw_stderr_ok() ? sys3(SYS_write, 2, (long)text, (long)len) : (long)len; /* (rt_util.c) */
	return r < 0 ? (int)r : (int)len;
}

__attribute__((visibility("hidden"))) int kprewrite_trace_printk(const char *func, const char *fmt, ...)
{
	char buf[KPRW_PRINTK_MAX];
	const char *text;
	__builtin_va_list ap;
	__builtin_va_start(ap, fmt);
	u32 len = line(buf, sizeof buf, fmt, ap, &text);
	__builtin_va_end(ap);
	u32 pi = kprw_user_current_probe();
	u64 site = pi < kprw_rt.nprobes ? kprw_rt.points[kprw_rt.probes[pi].point].site : 0;
	kprw_trace_text(site, (u64)(uptr)__builtin_return_address(0), func ? func : "", text, len, kprw_tctx_get());
	return (int)len;
}
