/*
 * zero.c - what a reused 64 KiB ring block costs a writer on this machine (issue 49):
 * the block zeroed (rep stosb, as the runtime's zero_block; rep stosq; a loop of 8-byte
 * stores) and then written by 2,048 32-byte records, round robin over a 32 MiB ring,
 * with or without a second thread reading the ring (as the recorder does); prints the
 * microseconds a block. The two passes over the block are memory-bound: the way of
 * zeroing does not matter, its pass does.
 *
 *   gcc -O2 -pthread -o zero scripts/bench/zero.c && ./zero 0 && ./zero 1
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <sys/mman.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
#define BLK (64<<10)
#define RING (32<<20)
static char *ring;
static volatile int stop; static volatile long rd;
static void *reader(void *a){ (void)a; long s=0; while(!stop){ for(long o=0;o<RING&&!stop;o+=64) s+=ring[o]; } rd=s; return 0; }
static void z_stosb(char *p){ long n=BLK; __asm__ volatile("rep stosb":"+D"(p),"+c"(n):"a"(0):"memory"); }
static void z_stosq(char *p){ long n=BLK/8; __asm__ volatile("rep stosq":"+D"(p),"+c"(n):"a"(0):"memory"); }
static void z_loop(char *p){ for(long i=0;i<BLK;i+=8) __asm__ volatile("movq $0,(%0)"::"r"(p+i):"memory"); }
int main(int argc,char**argv){
 ring=mmap(0,RING,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); memset(ring,1,RING);
 int withreader=argc>1&&atoi(argv[1]); pthread_t t; if(withreader) pthread_create(&t,0,reader,0);
 cpu_set_t s; CPU_ZERO(&s); CPU_SET(0,&s); sched_setaffinity(0,sizeof s,&s);
 void (*fs[])(char*)={z_stosb,z_stosq,z_loop}; const char*nm[]={"stosb","stosq","loop"};
 for(int r=0;r<2;r++) for(int k=0;k<3;k++){ double t0=now(); for(int it=0;it<4000;it++){ char*p=ring+((long)it*BLK)%RING; fs[k](p); for(long i=0;i<BLK;i+=32) *(volatile long*)(p+i)=i; } printf("%s%s: %.2f us a block (zero + 2048 record stores)\n", nm[k], withreader?" +reader":"", (now()-t0)/4000/1000); }
 stop=1; if(withreader) pthread_join(t,0); return 0; }
