// calls_throw.cc: C++ exceptions leave frames without returning: the calls they leave
// must end (lost) where the trace shows it, and later calls nest where they ran.
#include <cstdio>
#include <stdexcept>

__attribute__((noinline)) void thrower(int depth)
{
	if (depth == 0)
		throw std::runtime_error("deep");
	thrower(depth - 1);
	asm volatile("");
}
__attribute__((noinline)) int catcher()
{
	try {
		thrower(3);
	} catch (const std::exception &) {
		return 1;
	}
	return 0;
}
__attribute__((noinline)) void after() { puts("after"); }

int main()
{
	int n = 0;
	for (int i = 0; i < 5; i++)
		n += catcher();
	after();
	printf("%d\n", n);
	return 0;
}
