package debuginfo

import (
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"debug/elf"
)

const testSrc = `
struct s { int a; long b; };
int g = 3;
__attribute__((noinline)) int f(struct s *p, int n) {
	int t = p->a + n;
	g += t;
	return t * 2;
}
int main(int argc, char **argv) { struct s v = {argc, 2}; return f(&v, argc) > 100; }
`

func build(t *testing.T, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	if err := os.WriteFile(src, []byte(testSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "p")
	args := append([]string{"-o", out, src}, flags...)
	if o, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, o)
	}
	return out
}

func objcopy(t *testing.T, args ...string) {
	t.Helper()
	if o, err := exec.Command("objcopy", args...).CombinedOutput(); err != nil {
		t.Fatalf("objcopy %v: %v\n%s", args, err, o)
	}
}

// TestLoadBuildID finds the debug file of a stripped program in DebugRoot's
// .build-id directory, and reports the places it looked when there is none.
func TestLoadBuildID(t *testing.T) {
	bin := build(t, "-g", "-O2", "-Wl,--build-id")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	id := buildID(f)
	f.Close()
	if len(id) < 2 {
		t.Fatal("no build-id note")
	}
	root := t.TempDir()
	h := hex.EncodeToString(id)
	dbg := filepath.Join(root, ".build-id", h[:2], h[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dbg), 0o755); err != nil {
		t.Fatal(err)
	}
	objcopy(t, "--only-keep-debug", bin, dbg)
	stripped := bin + ".stripped"
	objcopy(t, "--strip-all", bin, stripped)
	old := DebugRoot
	DebugRoot = root
	defer func() { DebugRoot = old }()
	in, err := Load(stripped, "")
	if err != nil {
		t.Fatal(err)
	}
	if in.Path != dbg {
		t.Errorf("debug information read from %s, want %s", in.Path, dbg)
	}
	fs := in.Funcs("f", "")
	if len(fs) != 1 {
		t.Fatalf("functions f: %v", fs)
	}
	_, vars, err := in.Vars(fs[0].Entry)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range vars {
		if v.Err == nil {
			got[v.Name] = true
		}
	}
	if !got["p"] || !got["n"] || !got["g"] {
		t.Errorf("variables available at f's entry: %v", got)
	}
	os.Remove(dbg)
	_, err = Load(stripped, "")
	if !errors.Is(err, ErrNoDebugInfo) {
		t.Errorf("without the debug file: %v", err)
	}
	// a debug file of another build is refused
	other := build(t, "-g", "-O0", "-Wl,--build-id")
	if _, err := Load(stripped, other); err == nil {
		t.Error("a debug file with another build-id was accepted")
	}
}

// FuzzEval runs the location expression evaluator and the location list readers
// on any bytes: errors, never a panic.
func FuzzEval(f *testing.F) {
	f.Add([]byte{0x91, 0x6c}, uint64(0x1000))             // DW_OP_fbreg -20
	f.Add([]byte{0x55}, uint64(0))                        // DW_OP_reg5
	f.Add([]byte{0x75, 0x00, 0x9f}, uint64(0))            // DW_OP_breg5 0; stack_value
	f.Add([]byte{0xa3, 0x01, 0x55, 0x9f}, uint64(0x1000)) // entry_value(reg5)
	f.Add([]byte{0x03, 1, 2, 3, 4, 5, 6, 7, 8, 0x06, 0x23, 8}, uint64(0))
	f.Add([]byte{0x04, 0x00, 0x10, 0x02, 0x55, 0x00}, uint64(5))
	f.Add([]byte{0x50, 0x93, 8, 0x53, 0x93, 8}, uint64(0)) // reg0 piece 8 reg3 piece 8
	f.Fuzz(func(t *testing.T, b []byte, pc uint64) {
		in := &Info{sec: map[string][]byte{"loc": b, "loclists": b, "addr": b}}
		u := &unit{version: 5}
		ctx := &exprCtx{in: in, pc: pc, atEntry: pc&1 == 0,
			frame: func() (*Expr, error) { return &Expr{Kind: ExprReg, Reg: 7, Offset: 8}, nil }}
		loc, err := ctx.eval(b)
		if err == nil && loc.Empty() {
			t.Fatalf("%x: no location and no error", b)
		}
		for off := uint64(0); off < 4 && off < uint64(len(b)); off++ {
			in.loclist5(u, off, pc)
			in.loclist4(u, off, pc)
		}
	})
}

// TestEvalPieces: a value in pieces (Go's string in RAX and RBX, a struct with a
// piece on the stack and one optimized out) is read as its parts, each with its
// size; one piece alone is the location itself, as before pieces were read.
func TestEvalPieces(t *testing.T) {
	ctx := &exprCtx{in: &Info{}, frame: func() (*Expr, error) { return &Expr{Kind: ExprReg, Reg: 7, Offset: 8}, nil }}
	loc, err := ctx.eval([]byte{0x50, 0x93, 8, 0x53, 0x93, 8}) // reg0 piece 8, reg3 piece 8
	if err != nil || len(loc.Pieces) != 2 || *loc.Pieces[0].Reg != 0 || *loc.Pieces[1].Reg != 3 || loc.Pieces[1].Piece != 8 {
		t.Errorf("string in two registers: %+v, %v", loc, err)
	}
	loc, err = ctx.eval([]byte{0x93, 8, 0x91, 0x10, 0x93, 8, 0x52, 0x93, 4}) // piece 8 (none), fbreg 16 piece 8, reg2 piece 4
	if err != nil || len(loc.Pieces) != 3 || !loc.Pieces[0].Empty() || loc.Pieces[1].Addr == nil || loc.Pieces[1].Addr.Offset != 24 || loc.Pieces[2].Piece != 4 {
		t.Errorf("pieces on the stack and optimized out: %+v, %v", loc, err)
	}
	loc, err = ctx.eval([]byte{0x55, 0x93, 4}) // reg5 piece 4
	if err != nil || loc.Reg == nil || *loc.Reg != 5 || loc.Piece != 4 || loc.Pieces != nil {
		t.Errorf("one piece: %+v, %v", loc, err)
	}
	for _, b := range [][]byte{{0x93, 8}, {0x50, 0x93, 8, 0x53}, {0x50, 0x53, 0x93, 8}} {
		if _, err := ctx.eval(b); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%x: %v, want unavailable", b, err)
		}
	}
}
