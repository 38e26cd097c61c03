__attribute__((noinline)) long a(long n) { __asm__ volatile(""); return n; }
__attribute__((noinline)) long b(long n) { __asm__ volatile(""); return n + 1; }
int main(void) { long s = 0; for (long n = 1; n <= 40; n++) s += a(n) + (n % 4 == 0 ? b(n * 100) : 0); return s == 0; }
