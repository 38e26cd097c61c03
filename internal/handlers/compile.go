package handlers

import (
	"bytes"
	"context"
	_ "embed" // the support object's source
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kprewrite/kprewrite/internal/cleanup"
	"github.com/kprewrite/kprewrite/internal/infile"
	"github.com/kprewrite/kprewrite/internal/objlink"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

//go:embed csrc/support.c
var supportSource []byte

// SupportName is the name the support object has in messages and symbol tables.
const SupportName = "kprewrite-support.c"

// StackLimit is the most stack, in bytes, a handler may use over its deepest call chain
// (its own frame and every function it can call, the runtime's included). Handlers run
// on the probed thread's stack below its red zone, or in the SIGTRAP handler on the
// thread's signal stack when it has one (Go's is 32 KiB, C programs' often 8 to 64 KiB,
// shared with the kernel's signal frame and the runtime's own ~1.5 KiB); a handler with
// a deeper chain, a recursion or an unbounded dynamic frame is refused, as an overflow
// would write over the program's memory or kill it.
const StackLimit = 8192

// Flags are gcc's flags for handler files, mirroring runtime/build.sh: freestanding
// position-independent code, general registers only, no red zone, no stack protector,
// no unwind tables or jump tables, no standard headers, and stack use written out.
var Flags = []string{
	"-std=gnu11", "-O2", "-march=x86-64", "-mtune=generic", "-ffreestanding", "-fno-builtin", "-nostdlib", "-nostdinc",
	"-fPIC", "-fno-plt", "-fvisibility=hidden", "-fno-common", "-fno-stack-protector", "-fcf-protection=none",
	"-mgeneral-regs-only", "-mno-red-zone", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables",
	"-fno-jump-tables", "-fno-tree-loop-distribute-patterns", "-fno-ident", "-fno-exceptions",
	"-fstack-usage", "-fdiagnostics-color=never", "-Wall", "-Werror=implicit-function-declaration",
	"-Werror=int-conversion", "-Werror=incompatible-pointer-types",
}

// Options tune Compile.
type Options struct {
	CC      string        // the C compiler (default "gcc")
	Timeout time.Duration // per compilation (default 2 minutes)
}

// Set is a compiled set of handler files: everything a rewrite needs from them.
type Set struct {
	Units   []*Unit
	Support []byte  // the support object (csrc/support.c)
	Probes  []Probe // every declared probe, in file and declaration order
	// Externs are the program symbols the handlers use (KPREWRITE_PROGRAM_SYMBOL), sorted;
	// the rewriter resolves them in the binary.
	Externs []string
	Init    bool // some file defines kprewrite_init
	Exit    bool // some file defines kprewrite_exit
	// Stack is the measured stack of every handler entry (every function of the handler
	// files whose address is taken, kprewrite_init and kprewrite_exit), by file and line.
	Stack []StackUse
	// Warnings are gcc's warnings and calls whose stack use cannot be measured.
	Warnings []string
}

// StackUse is the stack a handler entry can use over its deepest call chain.
type StackUse struct {
	File     string
	Line     int
	Function string
	Bytes    int
	Path     string // the deepest chain, "f 64 → g 32 → kprewrite_printk 600 → ..."
}

// Objects parses the set's objects for objlink (support first, then the files in order).
func (s *Set) Objects() ([]*objlink.Object, error) {
	sup, err := objlink.ParseObject(SupportName, s.Support)
	if err != nil {
		return nil, err
	}
	out := []*objlink.Object{sup}
	for _, u := range s.Units {
		o, err := objlink.ParseObject(u.File, u.Object)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// Error is a failure to compile or check handler files. Text is the whole message
// (gcc's output for a compile error).
type Error struct {
	File string
	Text string
}

func (e *Error) Error() string { return e.Text }

// Compile compiles the handler files and checks what they declare and use.
func Compile(ctx context.Context, files []string, opt Options) (*Set, error) {
	if len(files) == 0 {
		return nil, errors.New("no handler files")
	}
	if opt.CC == "" {
		opt.CC = "gcc"
	}
	if opt.Timeout == 0 {
		opt.Timeout = 2 * time.Minute
	}
	for _, f := range files {
		if err := infile.Check(f); err != nil { // gcc would wait on a FIFO
			return nil, fmt.Errorf("compile handlers: %w", err)
		}
	}
	if _, err := exec.LookPath(opt.CC); err != nil {
		return nil, fmt.Errorf("compile handlers: %s is needed to compile C handlers: %w", opt.CC, err)
	}
	dir, err := os.MkdirTemp("", "kprewrite-handlers-")
	if err != nil {
		return nil, fmt.Errorf("compile handlers: %w", err)
	}
	// removed, then unregistered: an interrupting signal between the two still
	// finds it registered
	done := cleanup.Add(dir)
	defer func() { os.RemoveAll(dir); done() }()
	inc := filepath.Join(dir, "include")
	if err := os.Mkdir(inc, 0o755); err != nil {
		return nil, fmt.Errorf("compile handlers: %w", err)
	}
	if err := os.WriteFile(filepath.Join(inc, kprt.HandlerHeaderName), kprt.HandlerHeader, 0o644); err != nil {
		return nil, fmt.Errorf("compile handlers: %w", err)
	}
	sys, err := compilerInclude(ctx, opt)
	if err != nil {
		return nil, err
	}
	c := &compiler{opt: opt, dir: dir, inc: inc, sys: sys}

	set := &Set{}
	supSrc := filepath.Join(dir, SupportName)
	if err := os.WriteFile(supSrc, supportSource, 0o644); err != nil {
		return nil, fmt.Errorf("compile handlers: %w", err)
	}
	sup, _, supSU, err := c.compile(ctx, supSrc, "support")
	if err != nil {
		return nil, fmt.Errorf("compile the handlers' support object: %w", err)
	}
	set.Support = sup
	sus := [][]byte{supSU}
	for i, file := range files {
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("handler file: %w", err)
		}
		obj, warn, su, err := c.compile(ctx, file, fmt.Sprintf("h%d", i))
		if err != nil {
			return nil, err
		}
		set.Warnings = append(set.Warnings, warn...)
		sus = append(sus, su)
		u, err := ParseObject(file, obj)
		if err != nil {
			return nil, err
		}
		set.Units = append(set.Units, u)
	}
	if err := set.check(); err != nil {
		return nil, err
	}
	if err := set.boundStacks(sus); err != nil {
		return nil, err
	}
	return set, nil
}

// check gathers the probes and checks the set as a whole: unique names, one init and
// one exit, at least one probe, and every undefined symbol accounted for.
func (s *Set) check() error {
	supDefs := map[string]bool{}
	su, err := ParseObject(SupportName, s.Support)
	if err != nil {
		return err
	}
	for _, n := range su.Defined {
		supDefs[n] = true
	}
	api := map[string]bool{}
	for _, n := range kprt.HandlerAPI {
		api[n] = true
	}
	definedBy := map[string]string{}
	probeAt := map[string]string{}
	externs := map[string]bool{}
	var initIn, exitIn string
	for _, u := range s.Units {
		for _, n := range u.Defined {
			if prev, dup := definedBy[n]; dup {
				return &Error{File: u.File, Text: fmt.Sprintf("%s: %s is also defined in %s (handler files are linked together: make one of them static)", u.File, n, prev)}
			}
			if api[n] || supDefs[n] || strings.HasPrefix(n, "kprewrite_rt_") || strings.HasPrefix(n, "kprw_") {
				return &Error{File: u.File, Text: fmt.Sprintf("%s: defines %s, a name of kprewrite's runtime", u.File, n)}
			}
			definedBy[n] = u.File
		}
		for _, p := range u.Probes {
			if prev, dup := probeAt[p.Name]; dup {
				return &Error{File: u.File, Text: fmt.Sprintf("%s: probe %s is also declared at %s", p.Origin(), p.Name, prev)}
			}
			probeAt[p.Name] = fmt.Sprintf("%s:%d", p.File, p.Line)
			s.Probes = append(s.Probes, p)
		}
		for _, e := range u.Externs {
			externs[e.Name] = true
		}
		if u.Init {
			if initIn != "" {
				return &Error{File: u.File, Text: fmt.Sprintf("%s: kprewrite_init is also defined in %s", u.File, initIn)}
			}
			initIn, s.Init = u.File, true
		}
		if u.Exit {
			if exitIn != "" {
				return &Error{File: u.File, Text: fmt.Sprintf("%s: kprewrite_exit is also defined in %s", u.File, exitIn)}
			}
			exitIn, s.Exit = u.File, true
		}
	}
	for n := range externs {
		if _, ok := definedBy[n]; !ok {
			s.Externs = append(s.Externs, n)
		}
	}
	sort.Strings(s.Externs)
	for _, u := range s.Units {
		var bad []string
		for _, n := range u.Undefined {
			if api[n] || supDefs[n] || externs[n] || definedBy[n] != "" || n == "_GLOBAL_OFFSET_TABLE_" {
				continue
			}
			bad = append(bad, n)
		}
		if len(bad) > 0 {
			return &Error{File: u.File, Text: undefinedMessage(u.File, bad)}
		}
	}
	if len(s.Probes) == 0 && definedBy["kprewrite_init"] == "" {
		// (with an init, it may register struct kprobes by name at prepared sites)
		return &Error{File: s.Units[0].File, Text: "the handler files declare no probe (use DEFINE_KPROBE or DEFINE_KRETPROBE from kprewrite.h, or register_kprobe() in module_init at a site prepared with --prepare)"}
	}
	return nil
}

func undefinedMessage(file string, names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s: calls or uses %s, which is not available to handlers", file, n)
		if strings.HasPrefix(n, "__") {
			b.WriteString(" (a libgcc or libc helper the compiler called)")
		}
	}
	b.WriteString("\n  handlers are linked without libc: use kprewrite.h's helpers (pr_info, trace_printk, snprintf, ktime_get_ns,\n" +
		"  copy_from_user_nofault, memcpy, strlen...), and name a function or variable of the probed program with\n" +
		"  KPREWRITE_PROGRAM_SYMBOL(name) to use it")
	return b.String()
}

type compiler struct {
	opt      Options
	dir, inc string
	sys      string
}

// compile runs gcc on src; tag names the temporary object. It returns the object, the
// warnings gcc printed and gcc's stack usage file (.su).
func (c *compiler) compile(ctx context.Context, src, tag string) ([]byte, []string, []byte, error) {
	obj := filepath.Join(c.dir, tag+".o")
	args := append(append([]string{}, Flags...), "-isystem", c.sys, "-I", c.inc, "-c", src, "-o", obj)
	cctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, c.opt.CC, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C") // plain quotes in messages
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	cleanup.NoteChild(err)
	text := strings.ReplaceAll(out.String(), c.inc+string(filepath.Separator), "")
	text = strings.TrimRight(text, "\n")
	if err != nil {
		if text == "" {
			text = err.Error()
		}
		return nil, nil, nil, &Error{File: src, Text: fmt.Sprintf("compile handlers %s: %s failed:\n%s", src, c.opt.CC, text)}
	}
	var warns []string
	if text != "" {
		warns = append(warns, text)
	}
	data, err := os.ReadFile(obj)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("compile handlers %s: %w", src, err)
	}
	su, err := os.ReadFile(strings.TrimSuffix(obj, ".o") + ".su")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("compile handlers %s: %s wrote no stack usage (-fstack-usage): %w", src, c.opt.CC, err)
	}
	return data, warns, su, nil
}

// compilerInclude is the compiler's own header directory (stddef.h, stdint.h, stdarg.h),
// the one standard place -nostdinc leaves out that freestanding code may use.
func compilerInclude(ctx context.Context, opt Options) (string, error) {
	out, err := exec.CommandContext(ctx, opt.CC, "-print-file-name=include").Output()
	cleanup.NoteChild(err)
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" || dir == "include" {
		return "", fmt.Errorf("compile handlers: cannot find %s's include directory: %v", opt.CC, err)
	}
	return dir, nil
}
