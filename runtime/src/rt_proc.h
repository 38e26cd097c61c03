/* rt_proc.h - the process's images (rt_proc.c), included by rt.h */
#ifndef KPRW_RT_PROC_H
#define KPRW_RT_PROC_H
#ifndef KPRW_RT_H
#error "included by rt.h"
#endif

#define KPRW_PROC_IMAGES 64
struct kprw_proc {
	u64 magic, build; /* checked by a joining image (rt_proc.c) */
	u32 lock;
	u32 nimages;
	unsigned long installed; /* SIGBIT()s whose handler an image installed */
	struct {
		/* 1: the signal was this image's (a hit, a step, a fault of its copy or C
		 * handler), handled */
		int (*own)(int sig, struct k_siginfo *si, struct k_ucontext *uc);
		unsigned long sigs; /* the signals it registered for */
		struct kprw_tblk *tblk; /* its parts of the thread contexts (rt_thread.c) */
	} img[KPRW_PROC_IMAGES];
	struct kprw_tshare *tsh; /* the thread contexts (rt_thread.c) */
	/* the signal guard's (rt_sigguard.c): the program's disposition of each signal the
	 * runtime handles, the signals the guard keeps, whether int3 probes need SIGTRAP */
	struct k_sigaction sg_prog[32];
	u32 sg_seq;
	u32 sg_traps;
	unsigned long sg_sigs;
};
extern struct kprw_proc *kprw_proc;
void kprw_proc_join(int (*sig_own)(int, struct k_siginfo *, struct k_ucontext *));
int kprw_proc_take(int sig);
int kprw_proc_others(int sig, struct k_siginfo *si, struct k_ucontext *uc);
void kprw_proc_tblk(struct kprw_tblk *t);
void kprw_proc_tblk_leave(u32 i); /* context i changed thread or name: every image's block of it is left */
int kprw_trap_own(struct k_siginfo *si, struct k_ucontext *uc);   /* rt_trap.c */
int kprw_fault_own(int sig, struct k_siginfo *si, struct k_ucontext *uc); /* rt_fault.c */

#endif
