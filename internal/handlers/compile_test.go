package handlers

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/objlink"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

func needGCC(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
}

// write puts each name=source pair in a fresh directory and returns the paths.
func write(t testing.TB, files ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i := 0; i+1 < len(files); i += 2 {
		p := filepath.Join(dir, files[i])
		if err := os.WriteFile(p, []byte(files[i+1]), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

const goodHandlers = `#include <kprewrite.h>
#include <stdint.h>

extern int counter;
KPREWRITE_PROGRAM_SYMBOL(counter);
long work(long);
KPREWRITE_PROGRAM_SYMBOL(work);

static int pre(struct kprobe *p, struct pt_regs *regs)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%s", p->symbol_name);
	trace_printk("%s %lu %d\n", buf, regs->di, counter);
	return 0;
}
static void post(struct kprobe *p, struct pt_regs *regs, unsigned long flags)
{
	(void)p; (void)flags;
	pr_info("ax=%lu pid=%d t=%llu\n", regs->ax, current->pid, ktime_get_ns());
}
static int ret(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	uint64_t *d = (uint64_t *)ri->data;
	if (regs_return_value(regs) == 0)
		regs_set_return_value(regs, (unsigned long)work((long)d[0]));
	return 0;
}
static int entry(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	*(uint64_t *)ri->data = regs->di;
	return 0;
}

DEFINE_KPROBE(kp_work, "work", .pre_handler = pre, .post_handler = post);
DEFINE_KPROBE(kp_mid, "work+4", .pre_handler = pre, .offset = 2, .flags = KPROBE_FLAG_DISABLED);
DEFINE_KRETPROBE(rp_work, "work", .handler = ret, .entry_handler = entry, .maxactive = 20,
		 .data_size = sizeof(uint64_t));
DEFINE_KPROBE(kp_addr, "0x401000");

int kprewrite_init(void)
{
	struct kprobe *kps[] = {&kp_work, &kp_mid, &kp_addr};
	int r = register_kprobes(kps, 3);
	if (r < 0)
		return r;
	return register_kretprobe(&rp_work);
}
`

const secondHandlers = `#include <kprewrite.h>
static void post(struct kprobe *p, struct pt_regs *regs, unsigned long flags) { (void)p; (void)regs; (void)flags; }
DEFINE_KPROBE(kp_other, "other", .post_handler = post);
void kprewrite_exit(void) { pr_info("bye\n"); }
`

func TestCompile(t *testing.T) {
	needGCC(t)
	files := write(t, "good.c", goodHandlers, "second.c", secondHandlers)
	set, err := Compile(context.Background(), files, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !set.Init || !set.Exit {
		t.Errorf("init %v exit %v", set.Init, set.Exit)
	}
	if strings.Join(set.Externs, ",") != "counter,work" {
		t.Errorf("externs %q", set.Externs)
	}
	want := []Probe{
		{Kind: KindKprobe, Name: "kp_work", Site: "work", Line: 34, Pre: true, Post: true},
		{Kind: KindKprobe, Name: "kp_mid", Site: "work+4", Offset: 2, Line: 35, Pre: true, Disabled: true},
		{Kind: KindKretprobe, Name: "rp_work", Site: "work", Line: 36, Ret: true, Entry: true, MaxActive: 20, DataSize: 8},
		{Kind: KindKprobe, Name: "kp_addr", Site: "0x401000", Line: 38},
		{Kind: KindKprobe, Name: "kp_other", Site: "other", Line: 3, Post: true},
	}
	if len(set.Probes) != len(want) {
		t.Fatalf("probes %+v", set.Probes)
	}
	for i, w := range want {
		g := set.Probes[i]
		w.File = files[0]
		if i == 4 {
			w.File = files[1]
		}
		if g != w {
			t.Errorf("probe %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	defs := map[string]string{}
	for _, p := range set.Probes {
		ev, err := p.Event()
		if err != nil {
			t.Fatal(err)
		}
		defs[p.Name] = ev.Def
		if p.Name == "kp_mid" && (ev.Symbol != "work" || ev.Offset != 6) {
			t.Errorf("kp_mid site %s+%d, want work+6", ev.Symbol, ev.Offset)
		}
		if p.Name == "kp_addr" && ev.Addr != 0x401000 {
			t.Errorf("kp_addr address %#x", ev.Addr)
		}
	}
	if defs["rp_work"] != "r20:handlers/rp_work work" || defs["kp_mid"] != "p:handlers/kp_mid work+6" {
		t.Errorf("definitions %q", defs)
	}
	// every handler entry has a measured stack over its whole call chain, runtime included
	got := map[string]StackUse{}
	for _, s := range set.Stack {
		got[s.Function] = s
		if s.Bytes <= 0 || s.Bytes > StackLimit || !strings.HasPrefix(s.Path, s.Function+" ") {
			t.Errorf("%+v", s)
		}
	}
	for _, f := range []string{"pre", "post", "ret", "entry", "kprewrite_init", "kprewrite_exit"} {
		if _, ok := got[f]; !ok {
			t.Errorf("no stack bound for %s: %+v", f, set.Stack)
		}
	}
	// pre's deepest chain goes through the runtime's trace_printk, whose frame alone is
	// more than pre's
	if p := got["pre"]; !strings.Contains(p.Path, "kprewrite_trace_printk") || p.Bytes < 600 || p.Line != 9 || p.File != files[0] {
		t.Errorf("pre: %+v", p)
	}
	// ret calls the program's work: its stack is not measured, and the user is told
	if len(set.Warnings) != 1 || !strings.Contains(set.Warnings[0], "ret calls work, a function of the program, whose stack use is not measured") {
		t.Errorf("warnings %q", set.Warnings)
	}

	// the objects link with the runtime; the program symbols come from the binary
	objs, err := set.Objects()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := objlink.ParseObject("kprewrite_rt.o", kprt.Object)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := objlink.New(append([]*objlink.Object{rt}, objs...)...)
	if err != nil {
		t.Fatal(err)
	}
	prog := map[string]uint64{"counter": 0x404000, "work": 0x401100}
	out, err := lk.Link(objlink.Bases{Text: 0x500000, Rodata: 0x540000, Data: 0x580000, BSS: 0x5c0000}, func(n string) (uint64, bool) {
		a, ok := prog[n]
		return a, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"kp_work", "rp_work", "kprewrite_init", "kprewrite_exit", "memcpy"} {
		if _, ok := out.Addr(n); !ok {
			t.Errorf("%s not in the linked output", n)
		}
	}
	if len(out.AbsSlots) == 0 {
		t.Error("no absolute slots for the structs' pointers")
	}
	// without the program symbols the link names the missing one
	if _, err := lk.Link(objlink.Bases{Text: 0x500000, Rodata: 0x540000, Data: 0x580000, BSS: 0x5c0000}, nil); err == nil ||
		!strings.Contains(err.Error(), "undefined symbol") {
		t.Errorf("link without program symbols: %v", err)
	}
}

func TestCompileErrors(t *testing.T) {
	needGCC(t)
	cases := []struct {
		name, src string
		want      []string
	}{
		{"syntax", "#include <kprewrite.h>\nstatic int pre(struct kprobe *p, struct pt_regs *r) { return 0 }\n",
			[]string{"syntax.c:2:", "error: expected ';'", "failed:"}},
		{"libc", "#include <kprewrite.h>\nint printf(const char *, ...);\n" +
			"static int pre(struct kprobe *p, struct pt_regs *r) { printf(\"hi\"); return 0; }\n" +
			"DEFINE_KPROBE(kp, \"main\", .pre_handler = pre);\n",
			[]string{"libc.c: calls or uses printf, which is not available to handlers", "without libc"}},
		{"implicit", "#include <kprewrite.h>\nstatic int pre(struct kprobe *p, struct pt_regs *r) { return malloc(4) != 0; }\n" +
			"DEFINE_KPROBE(kp, \"main\", .pre_handler = pre);\n",
			[]string{"implicit.c:2:", "implicit declaration of function 'malloc'"}},
		{"stdio", "#include <stdio.h>\n", []string{"stdio.c:1:", "stdio.h: No such file"}},
		{"noprobe", "#include <kprewrite.h>\nint x;\n", []string{"declare no probe"}},
		{"static", "#include <kprewrite.h>\nvoid f(void) { DEFINE_KPROBE(kp, \"main\"); (void)kp; }\n",
			[]string{"static.c:2 (kp):", "not a global definition"}},
		{"badsite", "#include <kprewrite.h>\nDEFINE_KPROBE(kp, \"main+zz\");\n", []string{"badsite.c:2 (kp): site \"main+zz\""}},
		{"retoffset", "#include <kprewrite.h>\nDEFINE_KRETPROBE(rp, \"main+4\");\n", []string{"retoffset.c:2 (rp):", "function entry"}},
		{"maxactive", "#include <kprewrite.h>\nDEFINE_KRETPROBE(rp, \"main\", .maxactive = 5000);\n", []string{"maxactive 5000"}},
		{"runtime", "#include <kprewrite.h>\nDEFINE_KPROBE(kp, \"main\");\nint kprewrite_printk(const char *f, ...) { return 0; }\n",
			[]string{"runtime.c: defines kprewrite_printk, a name of kprewrite's runtime"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := write(t, c.name+".c", c.src)
			_, err := Compile(context.Background(), files, Options{})
			if err == nil {
				t.Fatal("compiled")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "kprewrite-handlers-") {
				t.Errorf("error shows the temporary directory: %q", err)
			}
		})
	}
}

func TestCompileSetErrors(t *testing.T) {
	needGCC(t)
	a := "#include <kprewrite.h>\nDEFINE_KPROBE(kp, \"main\");\nint kprewrite_init(void) { return 0; }\n"
	files := write(t, "a.c", a, "b.c", a)
	_, err := Compile(context.Background(), files, Options{})
	var he *Error
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "also defined in") || he.File != files[1] {
		t.Errorf("duplicate definitions: %v", err)
	}
	if _, err := Compile(context.Background(), []string{filepath.Join(t.TempDir(), "missing.c")}, Options{}); err == nil ||
		!strings.Contains(err.Error(), "missing.c") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Compile(context.Background(), write(t, "x.c", a), Options{CC: "no-such-cc"}); err == nil ||
		!strings.Contains(err.Error(), "no-such-cc is needed") {
		t.Errorf("missing compiler: %v", err)
	}
}

// TestSupportObject checks the support object: position-independent, no undefined
// symbols, and the names kprewrite.h declares.
func TestSupportObject(t *testing.T) {
	needGCC(t)
	set, err := Compile(context.Background(), write(t, "a.c", secondHandlers), Options{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := ParseObject(SupportName, set.Support)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Undefined) != 0 {
		t.Errorf("support object needs %v", u.Undefined)
	}
	for _, n := range []string{"memcpy", "memmove", "memset", "memcmp", "strlen", "strnlen", "strcmp", "strncmp", "strchr", "strscpy"} {
		found := false
		for _, d := range u.Defined {
			found = found || d == n
		}
		if !found {
			t.Errorf("support object lacks %s", n)
		}
	}
	f, err := elf.NewFile(strings.NewReader(string(set.Support)))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Sections {
		if s.Type == elf.SHT_RELA && s.Flags&elf.SHF_ALLOC == 0 && strings.Contains(s.Name, "text") {
			data, _ := s.Data()
			for i := 0; i+24 <= len(data); i += 24 {
				typ := elf.R_X86_64(f.ByteOrder.Uint64(data[i+8:]) & 0xffffffff)
				if typ != elf.R_X86_64_PC32 && typ != elf.R_X86_64_PLT32 {
					t.Errorf("%s: relocation %v", s.Name, typ)
				}
			}
		}
	}
}
