package tests

// The kernel API pieces of issue 46 item 5 that C handlers of the 2.6 era use:
// dump_stack() in a pre handler (the user stack at the hit, as a stack record the trace
// prints) and ri->task in a kretprobe's handlers (the thread running it, as current).

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const taskProgSrc = `#include <stdio.h>
__attribute__((noipa)) long leaf(long a) { return a + 1; }
__attribute__((noipa)) long middle(long a) { return leaf(a) * 2; }
int main(void) { printf("%ld\n", middle(20)); return 0; }
`

const taskHandlersSrc = `#include <kprewrite.h>
static int pre(struct kprobe *p, struct pt_regs *regs)
{
	dump_stack();
	return 0;
}
DEFINE_KPROBE(kp, "leaf", .pre_handler = pre);
static int entry(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	printk("entry task pid=%d same=%d comm=%s\n", ri->task->pid, ri->task == current, ri->task->comm);
	return 0;
}
static int ret(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	printk("ret task pid=%d same=%d ret=%ld\n", ri->task->pid, ri->task == current, regs_return_value(regs));
	return 0;
}
DEFINE_KRETPROBE(rp, "leaf", .entry_handler = entry, .handler = ret);
`

func TestHandlersDumpStackTask(t *testing.T) {
	testprog.Need(t, "gcc")
	dir := t.TempDir()
	prog := testprog.Build(t, taskProgSrc, "c", "-O1", "-fno-omit-frame-pointer")
	h := filepath.Join(dir, "h.c")
	os.WriteFile(h, []byte(taskHandlersSrc), 0o644)
	out := filepath.Join(dir, "task.kp")
	if code, stdout, stderr := kp("rewrite", "--handlers", h, "-o", out, prog); code != 0 {
		t.Fatalf("rewrite: %s%s", stdout, stderr)
	}
	tr := filepath.Join(dir, "task.trace")
	r := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + tr}})
	if r.Exit != 0 || r.Stdout != "42\n" {
		t.Fatalf("run: %s", r)
	}
	var entryPID, retPID int
	for _, l := range strings.Split(r.Stderr, "\n") {
		var same int
		var comm string
		if n, _ := fmt.Sscanf(l, "entry task pid=%d same=%d comm=%s", &entryPID, &same, &comm); n == 3 && (same != 1 || comm != "task.kp") {
			t.Errorf("entry handler: %q: want ri->task the current thread, named task.kp", l)
		}
		var ret int
		if n, _ := fmt.Sscanf(l, "ret task pid=%d same=%d ret=%d", &retPID, &same, &ret); n == 3 && (same != 1 || ret != 21) {
			t.Errorf("return handler: %q: want ri->task the current thread, ret 21", l)
		}
	}
	if entryPID == 0 || entryPID != retPID {
		t.Errorf("ri->task->pid %d at the entry, %d at the return; stderr:\n%s", entryPID, retPID, r.Stderr)
	}
	_, text, _ := kp("trace", "--no-header", tr)
	// the stack record: the probed leaf, its caller middle, then main
	if !strings.Contains(text, "<stack trace>\n => leaf\n => middle\n => main\n") {
		t.Errorf("trace: want dump_stack's stack (=> leaf, => middle, => main):\n%s", text)
	}
}
