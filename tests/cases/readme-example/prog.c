#include <stdio.h>
__attribute__((noinline)) int twice(int n) { return 2 * n; }
int main(void) { printf("%d\n", twice(3) + twice(4)); return 0; }
