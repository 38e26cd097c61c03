/* Source-level probe differential test program (tests/source_test.go): every probe
 * point and variable gdb can print is traced by kprewrite and compared. It must be
 * deterministic and valid C and C++. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum color { RED = 1, GREEN = 2, BLUE = 40 };
enum delta { DOWN = -3, SAME = 0, UP = 3 };

struct point {
	int x;
	long y;
};

struct req {
	int len;
	const char *name;
	unsigned flag : 3;
	unsigned kind : 5;
	unsigned char small;
	int skew : 4;
	enum color tint : 6;
	enum color color;
	float ratio;
	double weight;
	struct point at;
	int hist[4];
	char tag[8];
	struct req *next;
};

static int counter;
long total = 7;
static const char *label = "srcvars";

static inline __attribute__((always_inline)) int scale(int v, int by)
{
	int r = v * by;
	counter += r & 3;
	return r + 1;
}

__attribute__((noinline)) int sum_hist(const struct req *r)
{
	int s = 0;
	for (int i = 0; i < 4; i++) {
		s += r->hist[i] * (i + 1);
	}
	return s;
}

__attribute__((noinline)) long handle(struct req *r, int n, enum delta d)
{
	long acc = n;
	int k;
	for (k = 0; k < n; k++) {
		acc += scale(r->len + k, 3);
		if (r->flag & 1)
			acc -= r->kind;
	}
	acc += sum_hist(r) + d;
	if (r->next)
		acc += r->next->len;
	total += acc;
	return acc;
}

__attribute__((noinline)) const char *describe(const struct req *r, char *buf, size_t size)
{
	unsigned char first = (unsigned char)r->name[0];
	snprintf(buf, size, "%s/%d/%u", r->name, r->len, (unsigned)first);
	return buf;
}

__attribute__((noinline)) unsigned walk(struct req *head)
{
	unsigned steps = 0;
	struct req *p;
	for (p = head; p; p = p->next) {
		steps += p->small;
		p->at.x += (int)steps;
	}
	return steps;
}

__attribute__((noinline)) double weigh(const struct req *r, double w, float f)
{
	double acc = w * r->ratio;
	float part = f;
	for (int i = 0; i < 4; i++) {
		acc += r->hist[i] * r->weight;
		part += (float)r->skew;
	}
	return acc + part;
}

int main(int argc, char **argv)
{
	struct req tail = {0};
	struct req q;
	char text[64];
	int rounds = argc + 2;
	memset(&q, 0, sizeof q);
	q.len = 5;
	q.name = "query";
	q.flag = 3;
	q.kind = 9;
	q.small = 200;
	q.color = BLUE;
	q.skew = -3;
	q.tint = GREEN;
	q.ratio = 0.25f;
	q.weight = -1.5e10;
	q.at.x = -4;
	q.at.y = 1L << 40;
	for (int i = 0; i < 4; i++)
		q.hist[i] = 10 * i - 5;
	strcpy(q.tag, "tagged");
	q.next = &tail;
	tail.len = 11;
	tail.name = "tail";
	tail.small = 7;
	long res = handle(&q, rounds, UP);
	res += handle(&tail, 1, DOWN);
	unsigned steps = walk(&q);
	double w = weigh(&q, 3.0 + rounds, 0.1f);
	printf("%ld %u %s %d %ld %s %.3f\n", res, steps, describe(&q, text, sizeof text), counter, total, label, w);
	return 0;
}
