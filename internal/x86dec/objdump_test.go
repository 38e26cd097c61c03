package x86dec

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// objdumpInsn is one instruction line of `objdump -d -w`.
type objdumpInsn struct {
	addr  uint64
	n     int    // number of raw bytes printed
	text  string // mnemonic and operands
	label string // enclosing symbol label printed by objdump (for messages)
}

// walkObjdump streams `objdump -d -w path` and calls fn for every
// instruction line. -w keeps all raw bytes of one instruction on one line.
func walkObjdump(t testing.TB, path string, extra []string, fn func(objdumpInsn)) {
	t.Helper()
	args := append([]string{"-d", "-w"}, extra...)
	cmd := exec.Command("objdump", append(args, path)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("objdump pipe: %v", err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start objdump: %v", err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	label := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, ">:") && len(line) > 0 && line[0] != ' ' {
			if i := strings.IndexByte(line, '<'); i >= 0 {
				label = line[i+1 : len(line)-2]
			}
			continue
		}
		// "  41f004:\t48 8b 05 cd 6f 52 00 \tmov    0x526fcd(%rip),%rax"
		colon := strings.IndexByte(line, ':')
		if colon < 0 || !strings.HasPrefix(line, " ") {
			continue
		}
		rest := line[colon+1:]
		if !strings.HasPrefix(rest, "\t") {
			continue
		}
		rest = rest[1:]
		tab := strings.IndexByte(rest, '\t')
		hexs, text := rest, ""
		if tab >= 0 {
			hexs, text = rest[:tab], strings.TrimSpace(rest[tab+1:])
		}
		addr, err := strconv.ParseUint(strings.TrimSpace(line[:colon]), 16, 64)
		if err != nil {
			continue
		}
		n := len(strings.Fields(hexs))
		if n == 0 {
			continue
		}
		fn(objdumpInsn{addr: addr, n: n, text: text, label: label})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read objdump output: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("objdump %s: %v: %s", path, err, stderr.String())
	}
}

// image maps virtual addresses of executable sections to their bytes.
type image struct {
	secs []imageSec
	fns  []fnSym // FUNC symbols with a size, sorted by start
}

type imageSec struct {
	addr uint64
	data []byte
}

type fnSym struct {
	start, end uint64
	name       string
}

func loadImage(t testing.TB, path string) *image {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	img := &image{}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		d, err := s.Data()
		if err != nil {
			t.Fatalf("read %s %s: %v", path, s.Name, err)
		}
		img.secs = append(img.secs, imageSec{s.Addr, d})
	}
	var syms []elf.Symbol
	if s, err := f.Symbols(); err == nil {
		syms = append(syms, s...)
	}
	if s, err := f.DynamicSymbols(); err == nil {
		syms = append(syms, s...)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Section != elf.SHN_UNDEF {
			img.fns = append(img.fns, fnSym{s.Value, s.Value + s.Size, s.Name})
		}
	}
	sort.Slice(img.fns, func(i, j int) bool {
		if img.fns[i].start != img.fns[j].start {
			return img.fns[i].start < img.fns[j].start
		}
		return img.fns[i].end > img.fns[j].end
	})
	// Drop aliases (same start); keep the largest.
	out := img.fns[:0]
	for _, fs := range img.fns {
		if len(out) > 0 && out[len(out)-1].start == fs.start {
			continue
		}
		out = append(out, fs)
	}
	img.fns = out
	return img
}

// at returns the bytes from addr to the end of its section.
func (img *image) at(addr uint64) []byte {
	for _, s := range img.secs {
		if addr >= s.addr && addr < s.addr+uint64(len(s.data)) {
			return s.data[addr-s.addr:]
		}
	}
	return nil
}

// fn returns the index of the function symbol containing addr, or -1.
func (img *image) fn(addr uint64) int {
	i := sort.Search(len(img.fns), func(i int) bool { return img.fns[i].start > addr }) - 1
	if i >= 0 && addr < img.fns[i].end {
		return i
	}
	return -1
}

// isPrefixWord reports objdump's names for prefixes printed before a mnemonic.
func isPrefixWord(w string) bool {
	switch w {
	case "bnd", "notrack", "data16", "addr32", "lock", "cs", "ds", "ss", "es", "fs", "gs",
		"rep", "repz", "repnz", "repe", "repne", "xacquire", "xrelease":
		return true
	}
	return strings.HasPrefix(w, "rex") || strings.HasPrefix(w, "{")
}

// onlyPrefixes reports an objdump line that names prefixes and no instruction.
func onlyPrefixes(text string) bool {
	for _, w := range strings.Fields(text) {
		if !isPrefixWord(w) {
			return false
		}
	}
	return true
}

// objdumpKind maps objdump's mnemonic to our Kind and returns the first
// operand (the target of a direct branch).
func objdumpKind(text string) (k Kind, operand string) {
	f := strings.Fields(text)
	for len(f) > 0 && isPrefixWord(f[0]) {
		f = f[1:]
	}
	if len(f) == 0 {
		return KindOther, ""
	}
	m := f[0]
	if len(f) > 1 {
		operand = f[1]
	}
	indirect := strings.HasPrefix(operand, "*")
	switch {
	case m == "jmp" || m == "jmpq" || m == "jmpw":
		if indirect {
			return KindJmpIndirect, operand
		}
		return KindJmp, operand
	case m == "call" || m == "callq" || m == "callw":
		if indirect {
			return KindCallIndirect, operand
		}
		return KindCall, operand
	case m == "ljmp" || m == "ljmpq":
		return KindJmpFar, operand
	case m == "lcall" || m == "lcallq":
		return KindCallFar, operand
	case m == "loop" || m == "loope" || m == "loopne" || m == "jrcxz" || m == "jecxz" ||
		m == "loopq" || m == "loopeq" || m == "loopneq" || m == "loopl" || m == "loopel" || m == "loopnel":
		return KindLoop, operand
	case m == "ret" || m == "retq" || m == "retw":
		return KindRet, operand
	case m == "lret" || m == "lretq" || m == "lretw":
		return KindRetFar, operand
	case strings.HasPrefix(m, "iret"):
		return KindIret, operand
	case m == "xbegin" || m == "xbeginw" || m == "xbeginl" || m == "xbeginq":
		return KindXbegin, operand
	case m == "syscall" || m == "sysenter":
		return KindSyscall, operand
	case m == "int3":
		return KindInt3, operand
	case m == "ud2" || m == "ud1" || m == "ud0" || m == "ud1l" || m == "ud0l" || m == "ud1q" || m == "ud1w" ||
		m == "hlt" || m == "int" || m == "int1" || m == "icebp" || strings.HasPrefix(m, "sysret") || strings.HasPrefix(m, "sysexit"):
		return KindTrap, operand
	case len(m) >= 2 && m[0] == 'j':
		return KindJcc, operand
	}
	return KindOther, operand
}

// ripComment returns the target objdump prints after "# " for a
// RIP-relative operand.
func ripComment(text string) (uint64, bool) {
	i := strings.LastIndex(text, "# ")
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(text[i+2:])
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
	return v, err == nil
}

// groupStats are the agreement numbers for one group of instructions.
type groupStats struct {
	insns, lenMismatch, decodeErr, kindMismatch int
	branches, tgtMismatch                       int
	ripChecked, ripMismatch                     int
	notAgree, notTrusted                        int
}

func (g *groupStats) failures() int {
	return g.lenMismatch + g.kindMismatch + g.tgtMismatch + g.ripMismatch + g.notTrusted
}

func (g *groupStats) String() string {
	return fmt.Sprintf("%d insns: len mismatches %d, decode errors %d, kind mismatches %d, direct branches %d (target mismatches %d), "+
		"rip-relative %d (target mismatches %d), x86asm disagrees %d, untrusted %d",
		g.insns, g.lenMismatch, g.decodeErr, g.kindMismatch, g.branches, g.tgtMismatch, g.ripChecked, g.ripMismatch, g.notAgree, g.notTrusted)
}

// crossStats are the agreement numbers for one binary.
type crossStats struct {
	lines               int
	in, out             groupStats // inside FUNC symbols / outside any
	badFuncs, goodFuncs int
	notTrustedOps       map[string]int
	notAgreeOps         map[string]int
	examples            []string
}

func (s *crossStats) example(format string, args ...any) {
	if len(s.examples) < 40 {
		s.examples = append(s.examples, fmt.Sprintf(format, args...))
	}
}

func (s *crossStats) tally(g *groupStats, p pendingInsn, where string) {
	g.insns++
	if p.err {
		g.decodeErr++
	}
	if !p.ok {
		g.lenMismatch++
	}
	if !p.kindOK {
		g.kindMismatch++
	}
	if p.branch {
		g.branches++
		if !p.tgtOK {
			g.tgtMismatch++
		}
	}
	switch p.ripOK {
	case 1:
		g.ripChecked++
	case 2:
		g.ripChecked++
		g.ripMismatch++
	}
	if !p.agree {
		g.notAgree++
		s.notAgreeOps[p.opkey]++
	}
	if !p.trust {
		g.notTrusted++
		s.notTrustedOps[p.opkey]++
	}
	if !p.ok || !p.kindOK || (p.branch && !p.tgtOK) || p.ripOK == 2 || !p.trust {
		s.example("%s %#x <%s>: %s", p.detail, p.in.addr, where, p.in.text)
	}
}

func hexBytes(b []byte, n int) string {
	if n > len(b) {
		n = len(b)
	}
	var sb strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", b[i])
	}
	return sb.String()
}

// pendingInsn is a check result held until we know whether objdump could
// decode the whole function.
type pendingInsn struct {
	in     objdumpInsn
	ok     bool
	kindOK bool
	tgtOK  bool
	ripOK  int // 0 not checked, 1 ok, 2 mismatch
	branch bool
	err    bool
	agree  bool
	trust  bool
	opkey  string
	detail string
}

// crossCheckBinary compares Decode with objdump on every instruction line.
func crossCheckBinary(t *testing.T, path string) *crossStats {
	img := loadImage(t, path)
	st := &crossStats{notTrustedOps: map[string]int{}, notAgreeOps: map[string]int{}}
	perFn := map[int][]pendingInsn{}
	badFn := map[int]bool{}
	walkObjdump(t, path, nil, func(oi objdumpInsn) {
		st.lines++
		fi := img.fn(oi.addr)
		if strings.Contains(oi.text, "(bad)") {
			if fi >= 0 {
				badFn[fi] = true
			}
			return
		}
		code := img.at(oi.addr)
		p := checkOne(code, oi)
		if fi < 0 {
			st.tally(&st.out, p, oi.label)
			return
		}
		perFn[fi] = append(perFn[fi], p)
	})
	for fi, ps := range perFn {
		if badFn[fi] {
			st.badFuncs++
			continue
		}
		st.goodFuncs++
		for _, p := range ps {
			st.tally(&st.in, p, img.fns[fi].name)
		}
	}
	return st
}

func checkOne(code []byte, oi objdumpInsn) pendingInsn {
	p := pendingInsn{in: oi, kindOK: true, tgtOK: true, agree: true, trust: true}
	in, err := Decode(code, oi.addr)
	p.opkey = opKey(code, in)
	p.err = err != nil
	p.ok = err == nil && in.Len == oi.n
	if !p.ok {
		p.detail = fmt.Sprintf("len ours=%d objdump=%d err=%v bytes=[%s]", in.Len, oi.n, err, hexBytes(code, max(in.Len, oi.n)))
		return p
	}
	p.agree, p.trust = in.Agree, in.Trusted
	if !p.trust {
		p.detail = fmt.Sprintf("untrusted bytes=[%s]", hexBytes(code, in.Len))
	}
	k, operand := objdumpKind(oi.text)
	if k != in.Kind {
		p.kindOK = false
		p.detail = fmt.Sprintf("kind ours=%v objdump=%v bytes=[%s]", in.Kind, k, hexBytes(code, in.Len))
	}
	if in.Kind.IsDirectBranch() {
		p.branch = true
		v, perr := strconv.ParseUint(strings.TrimPrefix(operand, "0x"), 16, 64)
		if perr != nil || v != in.Target {
			p.tgtOK = false
			p.detail = fmt.Sprintf("target ours=%#x objdump=%q bytes=[%s]", in.Target, operand, hexBytes(code, in.Len))
		}
	}
	hasRIP := strings.Contains(oi.text, "(%rip)")
	if hasRIP || in.RIPRel {
		p.ripOK = 1
		tgt, ok := ripComment(oi.text)
		if hasRIP != in.RIPRel || !ok || tgt != in.RIPTarget {
			p.ripOK = 2
			p.detail = fmt.Sprintf("rip ours=%v %#x objdump=%v %#x bytes=[%s]", in.RIPRel, in.RIPTarget, hasRIP, tgt, hexBytes(code, in.Len))
		}
	}
	return p
}

// opKey names an encoding class for the untrusted/not-agree histograms.
func opKey(code []byte, in Inst) string {
	if in.Len == 0 || in.OpcodeOff >= len(code) {
		return "?"
	}
	return fmt.Sprintf("%v:%s", in.Enc, hexBytes(code, in.OpcodeOff+1))
}

func topN(m map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var kvs []kv
	for k, v := range m {
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v || kvs[i].v == kvs[j].v && kvs[i].k < kvs[j].k })
	var sb strings.Builder
	for i, e := range kvs {
		if i == n {
			break
		}
		fmt.Fprintf(&sb, " [%s]x%d", e.k, e.v)
	}
	return sb.String()
}

func needTool(t testing.TB, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s not installed", tool)
	}
}

// TestObjdumpCrossCheck decodes every instruction objdump prints in three
// system binaries and compares length, control-flow kind, direct target and
// RIP-relative target.
func TestObjdumpCrossCheck(t *testing.T) {
	needTool(t, "objdump")
	bins := []string{
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
		"/usr/bin/python3.11",
	}
	for _, bin := range bins {
		t.Run(bin[strings.LastIndexByte(bin, '/')+1:], func(t *testing.T) {
			if _, err := os.Stat(bin); err != nil {
				t.Skipf("%s not present", bin)
			}
			st := crossCheckBinary(t, bin)
			t.Logf("%s: %d objdump lines, %d functions checked, %d skipped (objdump printed (bad))", bin, st.lines, st.goodFuncs, st.badFuncs)
			t.Logf("inside function symbols: %v", &st.in)
			t.Logf("outside function symbols: %v", &st.out)
			t.Logf("x86asm disagreements by opcode:%s", topN(st.notAgreeOps, 15))
			if len(st.notTrustedOps) > 0 {
				t.Logf("untrusted by opcode:%s", topN(st.notTrustedOps, 15))
			}
			for _, ex := range st.examples {
				t.Log(ex)
			}
			if st.in.insns == 0 {
				t.Fatalf("no instructions checked")
			}
			// Outside symbols objdump's linear sweep may run through data,
			// so only the instructions inside function symbols must agree.
			if st.in.failures() > 0 {
				t.Errorf("disagreements with objdump (see log)")
			}
		})
	}
}

// TestObjdumpTricky assembles testdata/tricky.s (prefix combinations,
// moffs, enter, group 3, every opcode map, VEX/EVEX/XOP with RIP-relative
// operands, 3DNow!, SSE4a, AMX, privileged and trapping instructions) and
// checks every instruction against objdump.
func TestObjdumpTricky(t *testing.T) {
	needTool(t, "objdump")
	needTool(t, "gcc")
	obj := t.TempDir() + "/tricky.o"
	if out, err := exec.Command("gcc", "-c", "testdata/tricky.s", "-o", obj).CombinedOutput(); err != nil {
		t.Fatalf("assemble: %v\n%s", err, out)
	}
	f, err := elf.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	code, err := text.Data()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	st := &crossStats{notTrustedOps: map[string]int{}, notAgreeOps: map[string]int{}}
	var untrusted []string
	walkObjdump(t, obj, nil, func(oi objdumpInsn) {
		st.lines++
		if oi.addr >= uint64(len(code)) {
			t.Fatalf("objdump address %#x outside .text", oi.addr)
		}
		p := checkOne(code[oi.addr:], oi)
		if !p.trust {
			untrusted = append(untrusted, strings.Fields(oi.text)[0])
			p.trust = true // checked below, not a disagreement with objdump
		}
		st.tally(&st.in, p, oi.label)
	})
	t.Logf("%v", &st.in)
	t.Logf("x86asm disagreements by opcode:%s", topN(st.notAgreeOps, 40))
	t.Logf("untrusted (x86asm cannot confirm; analysis refuses them): %q", untrusted)
	for _, ex := range st.examples {
		t.Log(ex)
	}
	if st.in.insns < 400 {
		t.Fatalf("only %d instructions checked", st.in.insns)
	}
	if st.in.failures() > 0 || st.in.decodeErr > 0 {
		t.Errorf("disagreements with objdump (see log)")
	}
	// Only privileged, obsolete (3DNow!, SSE4a, FMA4) and exotic
	// instructions may stay untrusted; everything a user-space compiler
	// emits must be confirmed by x86asm or a known-gap rule.
	wantUntrusted := "clac clui enqcmds extrq extrq femms getsec hreset insertq insertq invept pavgusb pfadd pfmul pfrcp " +
		"setssbsy stac stui test test testui uiret vfmaddps vfmaddsd vmcall vmclear vmlaunch vmptrld vmptrst vmread vmwrite vmxoff vmxon"
	sort.Strings(untrusted)
	if got := strings.Join(untrusted, " "); got != wantUntrusted {
		t.Errorf("untrusted instructions:\n got %s\nwant %s", got, wantUntrusted)
	}
}

// compareChunks writes buf (fixed-size chunks, each starting with one
// instruction) to a file, disassembles it with objdump and compares the
// first instruction of every chunk objdump starts at. Where both decode,
// lengths must agree (objdump merges fwait with the following x87
// instruction; the CPU does not). Where only objdump decodes, our refusal
// must be a deliberate one.
func compareChunks(t *testing.T, buf []byte, chunk int) (both int) {
	file := t.TempDir() + "/chunks.bin"
	if err := os.WriteFile(file, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	deliberate := []string{
		"lock prefix on a non-lockable", "REX prefix not adjacent", "segment register",
		"operand-size prefix on a rel32 branch", "after a 66/f2/f3/lock/REX prefix",
	}
	var chunks, ourErr, objBad, objBadTrusted, fwait, failures int
	walkObjdump(t, file, []string{"-D", "-b", "binary", "-m", "i386:x86-64"}, func(oi objdumpInsn) {
		if oi.addr%uint64(chunk) != 0 || failures > 20 {
			return
		}
		chunks++
		code := buf[oi.addr : oi.addr+uint64(chunk)]
		in, err := Decode(code, oi.addr)
		// objdump prints a stray REX (or other prefix) as an instruction of its own.
		bad := strings.Contains(oi.text, "(bad)") || onlyPrefixes(oi.text)
		switch {
		case err != nil && bad:
		case err != nil:
			ourErr++
			ok := false
			for _, d := range deliberate {
				ok = ok || strings.Contains(err.Error(), d)
			}
			if !ok {
				failures++
				t.Errorf("we refuse what objdump decodes: [%s] %v; objdump: %s", hexBytes(code, oi.n), err, oi.text)
			}
		case bad:
			objBad++
			if in.Trusted {
				objBadTrusted++
			}
		case in.Len != oi.n:
			if code[in.OpcodeOff] == 0x9b && in.Enc == EncLegacy {
				fwait++
				return
			}
			failures++
			t.Errorf("length ours=%d objdump=%d: [%s] %s", in.Len, oi.n, hexBytes(code, 15), oi.text)
		default:
			both++
		}
	})
	t.Logf("%d chunks: %d decoded by both with the same length, %d fwait merges skipped, %d refused by us on purpose, "+
		"%d objdump (bad) that we decode (%d of them x86asm accepts too)", chunks, both, fwait, ourErr, objBad, objBadTrusted)
	return both
}

// TestObjdumpRandom compares the first instruction of many random byte
// chunks (biased towards prefixes, escapes and VEX/EVEX/XOP leads) with
// objdump.
func TestObjdumpRandom(t *testing.T) {
	needTool(t, "objdump")
	const chunk, count = 16, 60000
	r := rand.New(rand.NewSource(1))
	buf := make([]byte, count*chunk)
	leads := []byte{0x66, 0x67, 0xf2, 0xf3, 0xf0, 0x2e, 0x3e, 0x64, 0x48, 0x41, 0x4c}
	for i := 0; i < count; i++ {
		c := buf[i*chunk : (i+1)*chunk]
		r.Read(c)
		j := 0
		for r.Intn(3) == 0 && j < 3 {
			c[j] = leads[r.Intn(len(leads))]
			j++
		}
		switch r.Intn(6) {
		case 0:
			c[j] = 0x0f
		case 1:
			c[j], c[j+1] = 0x0f, 0x38
		case 2:
			c[j], c[j+1] = 0x0f, 0x3a
		case 3:
			c[j] = []byte{0xc4, 0xc5, 0x62, 0x8f}[r.Intn(4)]
		}
	}
	if both := compareChunks(t, buf, chunk); both < count/10 {
		t.Fatalf("only %d chunks compared", both)
	}
}

// TestObjdumpSystematic walks every opcode of every map (legacy 1-byte, 0F,
// 0F38, 0F3A under no/66/f2/f3/REX.W prefixes; VEX, EVEX and XOP with
// several pp/L/W/map values) with register, disp8, disp32, SIB and
// RIP-relative ModRM forms, and compares lengths with objdump.
func TestObjdumpSystematic(t *testing.T) {
	needTool(t, "objdump")
	const chunk = 24
	var buf []byte
	add := func(b []byte) {
		c := make([]byte, chunk)
		for i := range c {
			c[i] = 0x90 // objdump resynchronises on the nops after the instruction
		}
		copy(c, b)
		for i := len(b); i < len(b)+8; i++ {
			c[i] = 0x11 // SIB, displacement and immediate bytes
		}
		buf = append(buf, c...)
	}
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	legacyModRM := []byte{0x00, 0x05, 0x44, 0x84, 0xc0, 0x08, 0x38, 0xc8, 0xf8}
	for _, pfx := range [][]byte{nil, {0x66}, {0xf2}, {0xf3}, {0x48}} {
		for _, esc := range [][]byte{nil, {0x0f}, {0x0f, 0x38}, {0x0f, 0x3a}} {
			for op := 0; op < 256; op++ {
				for _, m := range legacyModRM {
					add(cat(pfx, esc, []byte{byte(op), m}))
				}
			}
		}
	}
	for op := 0xa0; op <= 0xa3; op++ {
		add([]byte{0x67, byte(op)}) // moffs32
	}
	var leads [][]byte
	for _, p := range []byte{0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd} {
		leads = append(leads, []byte{0xc5, p})
	}
	for _, m := range []byte{0xe1, 0xe2, 0xe3} {
		for _, p := range []byte{0x79, 0x7a, 0x7b, 0xfd} {
			leads = append(leads, []byte{0xc4, m, p})
		}
	}
	for _, m := range []byte{0xf1, 0xf2, 0xf3, 0xf5, 0xf6} {
		for _, p := range []byte{0x7c, 0x7d, 0xfd} {
			leads = append(leads, []byte{0x62, m, p, 0x48})
		}
	}
	for _, m := range []byte{0xe8, 0xe9, 0xea} {
		for _, p := range []byte{0x78, 0xf8} {
			leads = append(leads, []byte{0x8f, m, p})
		}
	}
	for _, lead := range leads {
		for op := 0; op < 256; op++ {
			for _, m := range []byte{0x00, 0x05, 0x44, 0xc0} {
				add(cat(lead, []byte{byte(op), m}))
			}
		}
	}
	if both := compareChunks(t, buf, chunk); both < 20000 {
		t.Fatalf("only %d chunks compared", both)
	}
}
