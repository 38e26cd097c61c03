__attribute__((noinline)) long take(long n) { __asm__ volatile(""); return n; }
int main(void) { long s = 0; for (long n = 1; n <= 100; n++) s += take(n); return s != 5050; }
