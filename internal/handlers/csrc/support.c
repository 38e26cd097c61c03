/*
 * support.c - the memory and string functions kprewrite.h declares, linked with every set
 * of C handlers (gcc may also call memcpy, memmove, memset and memcmp on its own, even
 * in freestanding code). Compiled with the handlers' flags; byte loops, because handlers
 * copy little and must not use vector registers.
 */
#include <kprewrite.h>

void *memcpy(void *dst, const void *src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	while (n--)
		*d++ = *s++;
	return dst;
}

void *memmove(void *dst, const void *src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	if (d < s) {
		while (n--)
			*d++ = *s++;
	} else {
		while (n--)
			d[n] = s[n];
	}
	return dst;
}

void *memset(void *dst, int c, size_t n)
{
	unsigned char *d = dst;
	while (n--)
		*d++ = (unsigned char)c;
	return dst;
}

int memcmp(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	for (; n; n--, x++, y++)
		if (*x != *y)
			return *x - *y;
	return 0;
}

size_t strlen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

size_t strnlen(const char *s, size_t max)
{
	size_t n = 0;
	while (n < max && s[n])
		n++;
	return n;
}

int strncmp(const char *a, const char *b, size_t n)
{
	for (; n; n--, a++, b++) {
		if (*a != *b)
			return (unsigned char)*a - (unsigned char)*b;
		if (!*a)
			return 0;
	}
	return 0;
}

int strcmp(const char *a, const char *b)
{
	return strncmp(a, b, (size_t)-1);
}

char *strchr(const char *s, int c)
{
	for (;; s++) {
		if (*s == (char)c)
			return (char *)s;
		if (!*s)
			return NULL;
	}
}

/* strscpy copies at most size-1 bytes and always terminates; -E2BIG when it had to cut. */
ssize_t strscpy(char *dst, const char *src, size_t size)
{
	size_t n = 0;
	if (size == 0)
		return -E2BIG;
	while (n + 1 < size && src[n]) {
		dst[n] = src[n];
		n++;
	}
	dst[n] = 0;
	return src[n] ? -E2BIG : (ssize_t)n;
}
