#include <cstdio>
#include <stdexcept>
#define NI __attribute__((noinline))
volatile int g;
extern "C" {
NI int thrower(int x) { if (x % 4 == 0) throw std::runtime_error("x"); return x + g; }
NI int tailthrow(int x) { g++; return thrower(x + 1); }
}
int main() {
	int caught = 0; long s = 0;
	for (int i = 0; i < 100; i++) { try { s += tailthrow(i); } catch (const std::exception &) { caught++; } }
	std::printf("caught=%d s=%ld\n", caught, s);
	return 0;
}
