/*
 * mallochook.c: a program that defines malloc, free, calloc and realloc on top of the
 * C library's __libc_* functions and counts its own calls, the way allocation hooks
 * and uftrace's malloc-hook programs do. The C library and the dynamic loader call
 * them too, and so do .preinit_array and a constructor, all before main. Each process
 * writes its counts when it ends (a destructor; write(2), no stdio, whose buffers would
 * be allocated and freed after the report):
 *   COUNTS pid malloc free calloc realloc early
 * where early is the number of calls made before main. A fork child counts from zero.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static unsigned long calls[4], early;
static void (*looked_up_free)(void *);
static pthread_key_t key;
void *volatile sink;

#define COUNT(i) __atomic_add_fetch(&calls[i], 1, __ATOMIC_RELAXED)

__attribute__((noinline)) void *malloc(size_t n)
{
	COUNT(0);
	return __libc_malloc(n);
}

__attribute__((noinline)) void free(void *p)
{
	COUNT(1);
	__libc_free(p);
}

__attribute__((noinline)) void *calloc(size_t n, size_t size)
{
	COUNT(2);
	return __libc_calloc(n, size);
}

__attribute__((noinline)) void *realloc(void *p, size_t n)
{
	COUNT(3);
	return __libc_realloc(p, n);
}

static unsigned long total(void)
{
	return calls[0] + calls[1] + calls[2] + calls[3];
}

/* run by the dynamic loader before any library's constructor */
static void preinit(void)
{
	looked_up_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
	sink = malloc(24);
	sink = realloc(sink, 4000);
	free(sink);
	sink = calloc(3, 7);
}
__attribute__((used, section(".preinit_array"))) static void (*preinit_table[])(void) = {preinit};

__attribute__((constructor)) static void ctor(void)
{
	free(sink);
	sink = malloc(5);
}

static void put_num(char *b, int *n, unsigned long v)
{
	char d[24];
	int k = 0;
	do
		d[k++] = (char)('0' + v % 10);
	while (v /= 10);
	b[(*n)++] = ' ';
	while (k)
		b[(*n)++] = d[--k];
}

__attribute__((destructor)) static void report(void)
{
	char b[160];
	int n = 0;
	memcpy(b, "COUNTS", 6);
	n = 6;
	put_num(b, &n, (unsigned long)getpid());
	for (int i = 0; i < 4; i++)
		put_num(b, &n, __atomic_load_n(&calls[i], __ATOMIC_RELAXED));
	put_num(b, &n, early);
	b[n++] = '\n';
	if (write(1, b, (size_t)n) != n)
		_exit(3);
}

static void tsd_free(void *p)
{
	free(p);
}

static void *thread(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100; i++) {
		char *p = malloc((size_t)i + 1);
		p = realloc(p, (size_t)i * 3 + 8);
		free(p);
	}
	pthread_setspecific(key, calloc(2, 16)); /* freed by tsd_free as the thread ends */
	return NULL;
}

int main(void)
{
	early = total();
	if (!looked_up_free)
		return 2;
	free(sink);
	pthread_key_create(&key, tsd_free);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, thread, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	pid_t pid = fork();
	if (pid == 0) {
		memset(calls, 0, sizeof calls);
		early = 0;
		for (int i = 0; i < 10; i++)
			sink = calloc(1, (size_t)i + 1), free(sink);
		exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
