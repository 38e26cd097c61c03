package handlers

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestHandlerStackBound: a handler's stack is measured over its whole call chain at
// rewrite time, and a handler that could overflow the stack it runs on is refused with
// the function, its measured stack and the chain, or the reason it has no bound.
func TestHandlerStackBound(t *testing.T) {
	needGCC(t)
	const head = "#include <kprewrite.h>\n"
	probe := "DEFINE_KPROBE(kp, \"main\", .pre_handler = pre);\n"
	cases := []struct {
		name  string
		files []string // name, source pairs
		want  []string // in the error; none: accepted
		bytes int      // accepted: pre's bound is at least this
	}{
		{name: "4 KiB buffer", files: []string{"h.c", head +
			"static int pre(struct kprobe *p, struct pt_regs *r) { char b[4000]; snprintf(b, sizeof b, \"%lu\", r->di); pr_info(\"%s\\n\", b); (void)p; return 0; }\n" + probe},
			bytes: 4000 + 600},
		{name: "1 MiB of locals", files: []string{"h.c", head +
			"static int pre(struct kprobe *p, struct pt_regs *r) { volatile char b[1 << 20]; b[r->di & 0xfffff] = 1; (void)p; return b[7]; }\n" + probe},
			want: []string{"h.c:2: handler function pre needs 10485", "bytes of stack (pre 10485", "more than the 8192 a handler may use", "keep large buffers in static or global variables"}},
		{name: "deep helper", files: []string{"h.c", head +
			"static __attribute__((noinline)) int helper(unsigned long x) { volatile char b[6000]; b[x % 6000] = 1; return b[3]; }\n" +
			"static __attribute__((noinline)) int middle(unsigned long x) { volatile char b[3000]; b[x % 3000] = 2; return helper(x) + b[1]; }\n" +
			"static int pre(struct kprobe *p, struct pt_regs *r) { (void)p; return middle(r->di); }\n" + probe},
			want: []string{"h.c:4: handler function pre needs", "(pre 8 → middle 30", " → helper 60"}},
		{name: "recursion", files: []string{"h.c", head +
			"static __attribute__((noinline)) long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n" +
			"static int pre(struct kprobe *p, struct pt_regs *r) { (void)p; return (int)fib((long)r->di); }\n" + probe},
			want: []string{"h.c:3: handler function pre has no stack bound: it can recurse without bound: fib → fib"}},
		{name: "recursion across files", files: []string{
			"a.c", head + "long ping(long n);\nlong pong(long n) { return n ? ping(n - 1) * 3 + 1 : 0; }\n" +
				"static int pre(struct kprobe *p, struct pt_regs *r) { (void)p; return (int)pong((long)r->di); }\n" + probe,
			"b.c", head + "long pong(long n);\nlong ping(long n) { return n ? pong(n - 1) * 5 + 2 : 1; }\n"},
			want: []string{"a.c:4: handler function pre has no stack bound: it can recurse without bound:", "ping → pong"}},
		{name: "variable-length array", files: []string{"h.c", head +
			"static int pre(struct kprobe *p, struct pt_regs *r) { volatile char b[r->di + 1]; b[0] = 1; (void)p; return b[0]; }\n" + probe},
			want: []string{"h.c:2: handler function pre has no stack bound: pre has a dynamic stack frame (alloca or a variable-length array)"}},
		{name: "recursion by pointer", files: []string{"h.c", head +
			"static long (*volatile step)(long);\n" +
			"static __attribute__((noinline)) long walk(long n) { return n ? step(n - 1) + 1 : 0; }\n" +
			"static int pre(struct kprobe *p, struct pt_regs *r) { (void)p; step = walk; return (int)walk((long)r->di); }\n" + probe},
			// (walk's address is taken by a lea the assembler resolved, no relocation: a
			// root and a callee by pointer too)
			want: []string{"h.c:3: handler function walk has no stack bound: it can recurse without bound: walk → walk (through a call by pointer in walk)",
				"h.c:4: handler function pre has no stack bound: it can recurse without bound: walk → walk"}},
		{name: "a handler set in init", files: []string{"h.c", head +
			"static struct kprobe kp = {.symbol_name = \"work\"};\n" +
			"static int pre(struct kprobe *p, struct pt_regs *r) { volatile char b[65536]; b[1] = 1; (void)p; (void)r; return b[1] - 1; }\n" +
			"int kprewrite_init(void) { kp.pre_handler = pre; return register_kprobe(&kp); }\n"},
			want: []string{"h.c:3: handler function pre needs 655"}},
		{name: "init with 64 KiB", files: []string{"h.c", head +
			"static int pre(struct kprobe *p, struct pt_regs *r) { (void)p; (void)r; return 0; }\n" + probe +
			"int kprewrite_init(void) { volatile char b[65536]; b[100] = 1; return b[100] - 1; }\n"},
			want: []string{"h.c:4: handler function kprewrite_init needs 655"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set, err := Compile(context.Background(), write(t, c.files...), Options{})
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range set.Stack {
					if s.Function == "pre" && (s.Bytes < c.bytes || s.Bytes > StackLimit) {
						t.Errorf("pre: %+v, want at least %d", s, c.bytes)
					}
				}
				if len(set.Warnings) != 0 {
					t.Errorf("warnings %q", set.Warnings)
				}
				return
			}
			var he *Error
			if !errors.As(err, &he) {
				t.Fatalf("accepted (%v); want %q", err, c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
