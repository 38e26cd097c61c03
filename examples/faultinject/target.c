/* target.c - the program examples/faultinject and examples/faultinject-libc make fail: it
 * builds a list of ten records with malloc() and copes with allocations that fail.
 * faultinject links it statically (-static: malloc is in the program), faultinject-libc
 * dynamically (malloc is libc.so.6's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct record {
	struct record *next;
	int id;
	char name[52];
};

int main(void)
{
	struct record *head = NULL;
	int made = 0, failed = 0;
	setvbuf(stdout, NULL, _IONBF, 0); /* no stdio buffer: the program's own mallocs only */
	for (int i = 1; i <= 10; i++) {
		struct record *r = malloc(sizeof *r);
		if (!r) {
			printf("record %d: out of memory, skipped\n", i);
			failed++;
			continue;
		}
		r->id = i;
		snprintf(r->name, sizeof r->name, "record-%d", i);
		r->next = head;
		head = r;
		made++;
	}
	printf("%d records made, %d allocations failed\n", made, failed);
	while (head) {
		struct record *n = head->next;
		free(head);
		head = n;
	}
	return 0;
}
