/*
 * fastread.c - the program fastread_test.go (and the kernel differential test) rewrites
 * with events whose fetch arguments read memory: peek(s, n, tag) is probed with string,
 * deref, nested deref, bitfield, array, $stackN and @symbol fetches, and called with good
 * and bad pointers (NULL, unmapped, PROT_NONE, a string that runs into an unmapped page,
 * a page another thread unmaps while the probes fire, a file page past EOF: SIGBUS).
 * The program also uses SIGSEGV/SIGBUS itself: its own handlers (siglongjmp out of a
 * guard page, mprotect and retry), SIG_IGN, blocked masks, kill(), a fault in its
 * handler, death by SIGSEGV. The rewritten program must print and end exactly as the
 * original; the probes' reads of bad pointers must never reach the program.
 * argv[1] picks the mode.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct node {
	struct node *next;
	int val;
	unsigned char flags, b[3];
};

unsigned int global_word = 0xfeedbeef;
const char *global_str = "global string";
static volatile long sink;

/* peek is the probed function; it does not touch its pointers */
__attribute__((noinline)) long peek(const char *s, const struct node *n, long tag)
{
	__asm__ volatile("" ::: "memory");
	sink += tag;
	return (long)(unsigned long)s ^ (long)(unsigned long)n;
}

/* fixed addresses: traces print some pointers, and the rewritten program's runtime maps
 * memory of its own, which would move the kernel's choices */
static char *map_at(unsigned long addr, unsigned long size, int prot)
{
	char *p = mmap((void *)addr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p != (char *)addr)
		exit(10);
	return p;
}

static char *page_pair(void)
{
	/* two pages, the second unmapped: a hole right after the first */
	static unsigned long next = 0x6f0000000000ul;
	char *p = map_at(next, 2 * 4096, PROT_READ | PROT_WRITE);
	next += 0x100000;
	munmap(p + 4096, 4096);
	return p;
}

static void good(void)
{
	static struct node last = {NULL, -7, 0xa5, {1, 2, 3}};
	static struct node first = {&last, 42, 0x3c, {9, 8, 7}};
	peek("hello", &first, 1);
	peek("", &last, 2);
	peek("a longer string that needs more than one chunk of sixty-four bytes to be read whole", &first, 3);
}

static void bad(void)
{
	char *none = map_at(0x6e0000000000ul, 4096, PROT_NONE);
	char *p = page_pair();
	struct node *tail = (struct node *)(p + 4096 - sizeof(struct node));
	memset(p, 'x', 4096);             /* no NUL before the hole */
	tail->next = (struct node *)(p + 4096); /* the next node is in the hole */
	tail->val = 5;
	peek(NULL, NULL, 10);
	peek((char *)8, (struct node *)16, 11);
	peek(p + 4096, (struct node *)(p + 4096), 12);    /* unmapped */
	peek(none, (struct node *)none, 13);               /* PROT_NONE */
	peek(p + 4096 - 5, tail, 14);                      /* string into the hole, nested deref into it */
	peek((char *)0xffff800000000000ul, (struct node *)0x800000000000ul, 15); /* kernel, non-canonical */
	strcpy(p + 4096 - 6, "edge");                      /* a string that ends right before the hole */
	peek(p + 4096 - 6, (struct node *)(p + 4096 - 4), 16); /* a node that crosses into the hole */
	printf("bad done\n");
}

/* race: one thread unmaps and maps again the page main's peek reads */
static char *volatile racy;
static volatile int stop;

static void *unmapper(void *arg)
{
	(void)arg;
	while (!stop) {
		munmap(racy, 4096);
		if (mmap(racy, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			exit(11);
		strcpy(racy, "mapped");
	}
	return NULL;
}

static void race(void)
{
	racy = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	strcpy(racy, "mapped");
	pthread_t th;
	pthread_create(&th, NULL, unmapper, NULL);
	for (int i = 0; i < 20000; i++)
		peek(racy, (struct node *)racy, i);
	stop = 1;
	pthread_join(th, NULL);
	printf("race done\n");
}

/* the program's own SIGSEGV handling */
static sigjmp_buf jb;
static volatile long caught, last_off, last_code;
static char *guard_base;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	caught++;
	last_code = si->si_code;
	if (si->si_code <= 0) { /* sent: si_addr holds the sender's pid */
		peek(NULL, NULL, 100 + sig);
		siglongjmp(jb, 1);
	}
	last_off = (char *)si->si_addr - guard_base;
	peek(NULL, (struct node *)si->si_addr, 100 + sig); /* probes in the handler read bad pointers too */
	siglongjmp(jb, 1);
}

static void handler(void)
{
	guard_base = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mprotect(guard_base + 4096, 4096, PROT_NONE); /* a guard page */
	struct sigaction sa, old;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO;
	sigfillset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	for (int i = 0; i < 3; i++) {
		peek(guard_base + 4096, (struct node *)(guard_base + 4096), 20 + i); /* never reaches on_segv */
		if (sigsetjmp(jb, 1) == 0) {
			guard_base[4096 + 8 * i] = 1;
			printf("no fault\n");
		} else {
			printf("caught %ld at +%ld code %ld\n", caught, last_off, last_code);
		}
	}
	sigaction(SIGSEGV, NULL, &old);
	printf("handler kept: %d flags %#x\n", old.sa_sigaction == on_segv, old.sa_flags & (SA_SIGINFO | SA_NODEFER | SA_RESETHAND));
	/* a signal sent, not raised by the CPU */
	if (sigsetjmp(jb, 1) == 0)
		kill(getpid(), SIGSEGV);
	printf("sent: caught %ld code %ld\n", caught, last_code);
	peek(NULL, (struct node *)(guard_base + 4096), 30);
	printf("handler done %ld\n", caught);
}

/* a handler that makes the page accessible and returns: the access is retried */
static void on_segv_fix(int sig)
{
	(void)sig;
	caught++;
	peek(guard_base + 4096, NULL, 40);
	mprotect(guard_base + 4096, 4096, PROT_READ | PROT_WRITE);
}

static void retry(void)
{
	guard_base = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mprotect(guard_base + 4096, 4096, PROT_NONE);
	signal(SIGSEGV, on_segv_fix);
	peek(guard_base + 4096, (struct node *)(guard_base + 4096), 41);
	guard_base[4096] = 'y';
	guard_base[4097] = 0;
	peek(guard_base + 4096, NULL, 42);
	printf("retry: caught %ld value %s\n", caught, guard_base + 4096);
}

/* SIGBUS: a file page past the end of the file */
static void on_bus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	(void)si;
	caught++;
	last_code = si->si_code;
	peek(NULL, NULL, 200 + sig);
	siglongjmp(jb, 1);
}

static void bus(void)
{
	char path[] = "/tmp/kpwfastreadXXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || ftruncate(fd, 4096) < 0)
		exit(12);
	char *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	unlink(path);
	if (ftruncate(fd, 0) < 0)
		exit(13);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_bus;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGBUS, &sa, NULL);
	peek(m, (struct node *)m, 50); /* the fetch's SIGBUS is the runtime's */
	if (sigsetjmp(jb, 1) == 0)
		sink += m[0];
	printf("bus: caught %ld code %ld\n", caught, last_code);
}

/* the mask: every signal blocked, SIGSEGV too */
static void block(void)
{
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	char *p = page_pair();
	peek(p + 4096, (struct node *)(p + 4096), 60);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	peek(p + 4090, (struct node *)(p + 4096), 61);
	sigprocmask(SIG_UNBLOCK, &all, NULL);
	printf("block done\n");
}

/* no handler: fetches from bad pointers, then the program's own fault kills it */
static void dfl(void)
{
	char *p = page_pair();
	peek(p + 4096, (struct node *)(p + 4096), 70);
	printf("about to fault\n");
	fflush(stdout);
	*(volatile int *)(p + 4096) = 1;
	printf("not reached\n");
}

/* ignored: a sent SIGSEGV is dropped, a fault the CPU raises still kills */
static void ign(void)
{
	char *p = page_pair();
	signal(SIGSEGV, SIG_IGN);
	peek(p + 4096, (struct node *)(p + 4096), 80);
	raise(SIGSEGV);
	printf("raised and ignored\n");
	fflush(stdout);
	sink += *(volatile char *)(p + 4096);
	printf("not reached\n");
}

/* a fault inside the program's own handler (SIGSEGV blocked there): death */
static void on_segv_bad(int sig)
{
	(void)sig;
	char *p = page_pair();
	peek(p + 4096, (struct node *)(p + 4096), 90); /* the probe reads by system call here */
	write(1, "in handler\n", 11);
	sink += *(volatile char *)(p + 4096);
	write(1, "not reached\n", 12);
}

static void nested(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_segv_bad;
	sigaction(SIGSEGV, &sa, NULL);
	char *p = page_pair();
	fflush(stdout);
	sink += *(volatile char *)(p + 4096);
	printf("not reached\n");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "good";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "good"))
		good();
	else if (!strcmp(mode, "bad"))
		bad();
	else if (!strcmp(mode, "diff")) {
		good();
		bad();
	} else if (!strcmp(mode, "race"))
		race();
	else if (!strcmp(mode, "handler"))
		handler();
	else if (!strcmp(mode, "retry"))
		retry();
	else if (!strcmp(mode, "bus"))
		bus();
	else if (!strcmp(mode, "block"))
		block();
	else if (!strcmp(mode, "dfl"))
		dfl();
	else if (!strcmp(mode, "ign"))
		ign();
	else if (!strcmp(mode, "nested"))
		nested();
	else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	return 3;
}
