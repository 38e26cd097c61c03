package tests

// register_kprobe() from a C handler at a site no rewrite prepared (issue 46 item 5): a
// plain struct kprobe whose symbol_name and offset are set in kprewrite_init, placed by
// the runtime from the analysis the rewrite embeds for the functions the handler file
// names; the point and slot it builds are the ones `kprewrite probe` would hand it.

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/tracectl"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// userSiteSrc calls work() 1000 times; work reads and writes a global (RIP-relative).
// With an argument it waits for a byte on stdin before it exits, so that its memory can
// be read. Its destructor runs after kprewrite_exit() has unregistered the probes: it
// prints work's first byte then.
const userSiteSrc = `#include <stdio.h>
#include <unistd.h>
long total;
__attribute__((noinline)) long work(long x)
{
	total += x;
	if (x % 3 == 0)
		total ^= 5;
	return total * 2 + x;
}
__attribute__((noinline)) long myid(void)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory");
	return r;
}
__attribute__((destructor)) static void after(void) { fprintf(stderr, "after %02x\n", *(volatile unsigned char *)work); }
int main(int argc, char **argv)
{
	long s = 0;
	char c;
	for (long i = 0; i < 1000; i++)
		s += work(i);
	printf("sum %ld %d\n", s, myid() > 0);
	fflush(stdout);
	if (argc > 1 && read(0, &c, 1) != 1)
		return 2;
	return 0;
}
`

// userSiteHandler registers a struct kprobe at each of offs (work+off), counting its
// hits, one at mid, which is inside an instruction, and one at myid+sys, a syscall
// (which the analysis refuses).
func userSiteHandler(offs []uint64, mid, sys uint64) string {
	var list []string
	for _, o := range offs {
		list = append(list, strconv.FormatUint(o, 10))
	}
	return fmt.Sprintf(`#include <kprewrite.h>
#define N %d
static const unsigned offs[N] = {%s};
long myid(void);
KPREWRITE_PROGRAM_SYMBOL(myid);
static struct kprobe kp[N], bad = {.symbol_name = "work"}, refused = {.symbol_name = "myid"}, dup = {.symbol_name = "work"}, byaddr;
static long hits[N];
static int pre(struct kprobe *p, struct pt_regs *regs) { (void)regs; hits[p - kp]++; return 0; }
static long myid_hits;
static int pre1(struct kprobe *p, struct pt_regs *regs) { (void)p; (void)regs; myid_hits++; return 0; }
static int init(void)
{
	for (int i = 0; i < N; i++) {
		kp[i].symbol_name = "work";
		kp[i].offset = offs[i];
		kp[i].pre_handler = pre;
		printk("reg %%d %%d\n", i, register_kprobe(&kp[i]));
	}
	bad.offset = %d;
	bad.pre_handler = pre;
	unregister_kprobe(&kp[0]); /* (its free point is taken again) */
	printk("rereg %%d\n", register_kprobe(&kp[0]));
	dup.pre_handler = pre;
	printk("regdup %%d\n", register_kprobe(&dup));
	printk("regbad %%d\n", register_kprobe(&bad));
	refused.offset = %d;
	refused.pre_handler = pre;
	printk("regrefused %%d\n", register_kprobe(&refused));
	byaddr.addr = (kprobe_opcode_t *)myid; /* (no symbol_name: the function holding the address) */
	byaddr.pre_handler = pre1;
	printk("regaddr %%d\n", register_kprobe(&byaddr));
	return 0;
}
static void fini(void)
{
	for (int i = 0; i < N; i++)
		unregister_kprobe(&kp[i]);
	unregister_kprobe(&byaddr);
	for (int i = 0; i < N; i++)
		printk("hits %%d %%ld\n", i, hits[i]);
	printk("myid hits %%ld\n", myid_hits);
}
module_init(init)
module_exit(fini)
`, len(offs), strings.Join(list, ", "), mid, sys)
}

// syscallOffset is the offset of the syscall instruction of myid in the ELF file at path.
func syscallOffset(t *testing.T, path string) uint64 {
	t.Helper()
	at := ^uint64(0)
	eachInsn(t, path, "myid", func(off uint64, in x86dec.Inst, _ []byte) bool {
		if in.Kind == x86dec.KindSyscall {
			at = off
		}
		return at == ^uint64(0) && off < 64
	})
	if at == ^uint64(0) {
		t.Fatal("myid has no syscall")
	}
	return at
}

// workSites are offsets of work's instructions in the ELF file at path: its entry,
// its second instruction, every RIP-relative one, its ret; and an offset inside an
// instruction.
func workSites(t *testing.T, path string) (offs []uint64, rip []uint64, mid uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr, _ := siteOf(t, path, "work")
	text := f.Section(".text")
	code, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	for off := uint64(0); ; {
		in, err := x86dec.Decode(code[addr-text.Addr+off:], addr+off)
		if err != nil {
			t.Fatal(err)
		}
		if off == 0 || len(offs) == 1 || in.RIPRel || in.Kind == x86dec.KindRet { // (a ret is emulated)
			offs = append(offs, off)
		}
		if in.RIPRel {
			rip = append(rip, off)
		}
		if mid == 0 && in.Len > 1 {
			mid = off + 1
		}
		if in.Kind == x86dec.KindRet {
			break
		}
		off += uint64(in.Len)
	}
	if len(rip) == 0 {
		t.Fatalf("work has no RIP-relative instruction: the slot's displacement is not tested")
	}
	return offs, rip, mid
}

func TestUserSiteRegister(t *testing.T) {
	prog := testprog.Build(t, userSiteSrc, "c", "-O2")
	orig := testprog.Run(t, testprog.Cmd{Path: prog})
	_, first := siteOf(t, prog, "work")
	offs, rip, mid := workSites(t, prog)
	sys := syscallOffset(t, prog)
	t.Logf("work+%v (RIP-relative: %v), inside an instruction work+%d, a syscall myid+%d", offs, rip, mid, sys)
	dir := t.TempDir()
	h := filepath.Join(dir, "h.c")
	if err := os.WriteFile(h, []byte(userSiteHandler(offs, mid, sys)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog.kp")
	if code, o, e := kp("rewrite", "--handlers", h, "-o", bin, prog); code != 0 {
		t.Fatalf("rewrite: exit %d\n%s%s", code, o, e)
	}
	if _, b := siteOf(t, bin, "work"); b != first {
		t.Fatalf("the rewrite changed work's first byte: %#x, want %#x", b, first)
	}
	r := testprog.Run(t, testprog.Cmd{Path: bin})
	if r.Stdout != orig.Stdout || r.Exit != 0 {
		t.Fatalf("the program: exit %d, %q, want %q; stderr:\n%s", r.Exit, r.Stdout, orig.Stdout, r.Stderr)
	}
	for i, o := range offs {
		if !strings.Contains(r.Stderr, fmt.Sprintf("reg %d 0\n", i)) || !strings.Contains(r.Stderr, fmt.Sprintf("hits %d 1000\n", i)) {
			t.Errorf("work+%d (RIP-relative ones: %v): want registered and 1000 hits, stderr:\n%s", o, rip, r.Stderr)
		}
	}
	if !strings.Contains(r.Stderr, "regdup -16\n") || !strings.Contains(r.Stderr, "register_kprobe(work+0): another probe is at this instruction") {
		t.Errorf("a second struct kprobe at work+0: want -EBUSY and why, stderr:\n%s", r.Stderr)
	}
	if !strings.Contains(r.Stderr, "regaddr 0\n") || !strings.Contains(r.Stderr, "myid hits 1\n") {
		t.Errorf("kp->addr = myid (no symbol_name): want registered and one hit, stderr:\n%s", r.Stderr)
	}
	if !strings.Contains(r.Stderr, "rereg 0\n") {
		t.Errorf("work+0 registered again after unregister_kprobe: want 0, stderr:\n%s", r.Stderr)
	}
	want := fmt.Sprintf("register_kprobe(work+%d): not the start of an instruction", mid)
	if !strings.Contains(r.Stderr, "regbad -22\n") || !strings.Contains(r.Stderr, want) {
		t.Errorf("work+%d: want -EINVAL and %q, stderr:\n%s", mid, want, r.Stderr)
	}
	want = fmt.Sprintf("register_kprobe(myid+%d): uprobes-refuses at ", sys)
	if !strings.Contains(r.Stderr, "regrefused -22\n") || !strings.Contains(r.Stderr, want) {
		t.Errorf("myid+%d: want -EINVAL and %q, stderr:\n%s", sys, want, r.Stderr)
	}
	if w := fmt.Sprintf("after %02x\n", first); !strings.Contains(r.Stderr, w) {
		t.Errorf("after unregister_kprobe: want %q (the original byte back), stderr:\n%s", w, r.Stderr)
	}
	t.Run("slots", func(t *testing.T) { testUserSiteSlots(t, bin, len(offs)+1) }) // (and myid, by address)
	t.Run("notrace", func(t *testing.T) {
		// no trace file, no live-probe thread to place the sites: -ENOENT, said
		r := testprog.Run(t, testprog.Cmd{Path: bin, Extra: []string{"KPREWRITE_TRACE="}})
		if r.Stdout != orig.Stdout || !strings.Contains(r.Stderr, "reg 0 -2\n") || !strings.Contains(r.Stderr, "which needs a trace file") {
			t.Errorf("the program: %q, want %q and -ENOENT with why; stderr:\n%s", r.Stdout, orig.Stdout, r.Stderr)
		}
	})
	t.Run("patched", func(t *testing.T) {
		// an event of the rewrite at work's entry: its site is no free point's
		bin := filepath.Join(t.TempDir(), "prog.kp")
		if code, o, e := kp("rewrite", "-e", "p:t/w work", "--no-optimize", "--handlers", h, "-o", bin, prog); code != 0 {
			t.Fatalf("rewrite: exit %d\n%s%s", code, o, e)
		}
		r := testprog.Run(t, testprog.Cmd{Path: bin})
		if r.Stdout != orig.Stdout || !strings.Contains(r.Stderr, "reg 0 -16\n") || !strings.Contains(r.Stderr, "reg 1 0\n") ||
			!strings.Contains(r.Stderr, "hits 1 1000\n") {
			t.Errorf("the program: %q, want %q, work+0 -EBUSY and work+%d placed; stderr:\n%s", r.Stdout, orig.Stdout, offs[1], r.Stderr)
		}
	})
}

// testUserSiteSlots runs bin until it waits, and compares each free live point the
// runtime placed, its table entry and slot as the process holds them, with what
// `kprewrite probe` makes for the same site and free point (tracectl.FreePointBytes).
func testUserSiteSlots(t *testing.T, bin string, n int) {
	cmd := exec.Command(bin, "wait")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.HasPrefix(line, "sum ") {
		t.Fatalf("the program: %q, %v; stderr:\n%s", line, err, stderr.String())
	}
	ef, err := elfio.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	im, err := tracefile.ReadImage(ef)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	base := imageBase(t, cmd.Process.Pid, bin)
	read := func(addr uint64, size int) []byte {
		b := make([]byte, size)
		if _, err := mem.ReadAt(b, int64(base+addr)); err != nil {
			t.Fatal(err)
		}
		return b
	}
	placed := 0
	h := im.Header
	for k, free := range im.Points[h.NPoints:] {
		point := read(h.Points+uint64(h.NPoints+uint32(k))*kprt.PointSize, kprt.PointSize)
		site := le64(point)
		if site == 0 {
			continue
		}
		placed++
		wantPoint, wantSlot, err := tracectl.FreePointBytes(ef, site, free)
		if err != nil {
			t.Fatalf("kprewrite probe at %#x: %v", site, err)
		}
		if slot := read(free.Slot, kprt.FreeSlot); !bytes.Equal(slot, wantSlot) {
			t.Errorf("site %#x, free point %d: the runtime's slot\n% x\nkprewrite probe's\n% x", site, k, slot, wantSlot)
		}
		if !bytes.Equal(point, wantPoint) {
			t.Errorf("site %#x, free point %d: the runtime's point\n% x\nkprewrite probe's\n% x", site, k, point, wantPoint)
		}
		if b := read(site, 1); b[0] != 0xcc {
			t.Errorf("site %#x: %#x, want the int3 while registered", site, b[0])
		}
	}
	if placed != n {
		t.Errorf("%d free live points placed, want %d; stderr:\n%s", placed, n, stderr.String())
	}
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestSamples26Unprepared: the 2.6 kprobe and jprobe samples (testdata/samples26, as
// TestSamples26 runs them) at a function the rewrite did not prepare: the embedded
// analysis places them (the kprobe sample's post_handler single-steps the boosted
// site). The kretprobe sample needs a prepared function: -ENOENT, the program unchanged.
func TestSamples26Unprepared(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "samples26", "target.c"))
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2")
	for _, c := range []struct{ file, line string }{
		{"kprobe_example.c", "post_handler: p->addr = "},
		{"jprobe_example.c", "jprobe: a = "},
		{"kretprobe_example.c", "do_work returned "},
	} {
		t.Run(strings.TrimSuffix(c.file, ".c"), func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "target.kp")
			if code, o, e := kp("rewrite", "--handlers", filepath.Join("testdata", "samples26", c.file), "-o", bin, prog); code != 0 {
				t.Fatalf("rewrite: exit %d\n%s%s", code, o, e)
			}
			r := testprog.Run(t, testprog.Cmd{Path: bin})
			if r.Stdout != "sum 130\n" || r.Exit != 0 {
				t.Fatalf("the program: exit %d, %q; stderr:\n%s", r.Exit, r.Stdout, r.Stderr)
			}
			if n := strings.Count(r.Stderr, c.line); n != 5 || !strings.Contains(r.Stderr, "Planted") || !strings.Contains(r.Stderr, "unregistered") {
				t.Errorf("%d of 5 calls seen (%q), want registration, 5 calls, unregistration; stderr:\n%s", n, c.line, r.Stderr)
			}
		})
	}
}

// userRetSrc calls work() and peek() 1000 times each; peek reads its own return address
// (a return probe there would be seen by it: the analysis refuses one).
const userRetSrc = `#include <stdio.h>
__attribute__((noinline)) long work(long x) { return x * 3 + 1; }
__attribute__((noinline)) long peek(long x) { return x + ((long)__builtin_return_address(0) & 1); }
int main(void)
{
	long s = 0, p = 0;
	for (long i = 0; i < 1000; i++) {
		s += work(i);
		p += peek(i) - i;
	}
	printf("sum %ld %ld\n", s, p);
	return 0;
}
`

// userRetHandler registers a struct kretprobe at work (neither prepared nor probed by
// the rewrite), whose entry and return handlers check that the return value is the
// argument's 3x + 1, and asks for two that must be refused: at peek, and at work + 1.
const userRetHandler = `#include <kprewrite.h>
struct my_data { long arg; };
static long calls, right;
static int entry(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	((struct my_data *)ri->data)->arg = (long)regs->di;
	return 0;
}
static int ret(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	calls++;
	right += regs_return_value(regs) == ((struct my_data *)ri->data)->arg * 3 + 1;
	return 0;
}
static struct kretprobe rp = {.handler = ret, .entry_handler = entry, .data_size = sizeof(struct my_data)};
static struct kretprobe peekrp = {.handler = ret}, offrp = {.handler = ret};
static int __init init(void)
{
	rp.kp.symbol_name = "work";
	peekrp.kp.symbol_name = "peek";
	offrp.kp.symbol_name = "work";
	offrp.kp.offset = 1;
	printk("peek %d off %d\n", register_kretprobe(&peekrp), register_kretprobe(&offrp));
	return register_kretprobe(&rp);
}
static void __exit fini(void)
{
	unregister_kretprobe(&rp);
	printk("calls %ld right %ld missed %d\n", calls, right, rp.nmissed);
}
module_init(init);
module_exit(fini);
`

// TestUserSiteKretprobe: register_kretprobe() of a struct kretprobe at a function no
// rewrite prepared takes a free return point (entry_handler and handler see every call,
// the instance data carried between them); at a function that reads its return address
// it is refused with the rule (-EINVAL), as at an offset other than the entry.
func TestUserSiteKretprobe(t *testing.T) {
	prog := testprog.Build(t, userRetSrc, "c", "-O2")
	dir := t.TempDir()
	h := filepath.Join(dir, "ret.c")
	if err := os.WriteFile(h, []byte(userRetHandler), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog.kp")
	if code, o, e := kp("rewrite", "--handlers", h, "-o", bin, prog); code != 0 {
		t.Fatalf("rewrite: exit %d\n%s%s", code, o, e)
	}
	want := testprog.Run(t, testprog.Cmd{Path: prog}).Stdout
	r := testprog.Run(t, testprog.Cmd{Path: bin})
	if r.Exit != 0 || r.Stdout != want {
		t.Fatalf("the program: exit %d, %q (want %q); stderr:\n%s", r.Exit, r.Stdout, want, r.Stderr)
	}
	for _, s := range []string{"peek -22 off -22\n", "calls 1000 right 1000 missed 0\n",
		"register_kretprobe(peek+0): retprobe-return-address", "register_kretprobe(work+1): "} {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.Stderr)
		}
	}
}
