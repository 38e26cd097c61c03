package cli

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"kprewrite/elfio"
)

func runRewrite(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("rewrite", "rewrite -o OUT [-e DEF]... [-f DEFFILE]... BINARY", stdout)
	out := fs.String("o", "", "output file (written atomically; required)")
	var exprs, files multiFlag
	fs.Var(&exprs, "e", "probe event definition (repeatable)")
	fs.Var(&files, "f", "file of probe event definitions, one per line (repeatable)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one BINARY, got %d arguments (see kprewrite rewrite -h)", len(pos))
	}
	if *out == "" {
		return usageErr("-o OUT is required")
	}
	if sameFile(pos[0], *out) {
		return usageErr("output %s is the input: kprewrite never modifies its input", *out)
	}
	defs, err := readDefs(exprs, files)
	if err != nil {
		return err
	}
	if len(defs) > 0 {
		return fmt.Errorf("%s: installing probes is not implemented yet; only the probe-less rewrite (new segments and an entry stub) works", defs[0].Origin)
	}
	f, err := elfio.Open(pos[0])
	if err != nil {
		return err
	}
	img, err := nullRewrite(f)
	if err != nil {
		return err
	}
	mode := os.FileMode(0o755)
	if st, err := os.Stat(pos[0]); err == nil {
		mode = st.Mode().Perm()
	}
	return elfio.WriteFileAtomic(*out, img, mode)
}

// nullRewrite adds the new segments with an entry stub that only jumps to the original
// entry: the rewritten program must behave exactly like the original.
func nullRewrite(f *elfio.File) ([]byte, error) {
	const stubLen = 5
	layout, err := f.PlanLayout(stubLen, 0, 0, 0)
	if err != nil {
		return nil, err
	}
	stub := make([]byte, stubLen)
	stub[0] = 0xe9 // jmp rel32 to the original entry
	rel := int64(f.Entry) - int64(layout.TextAddr+stubLen)
	if rel != int64(int32(rel)) {
		return nil, fmt.Errorf("%s: original entry %#x is out of jmp rel32 reach of the new text at %#x", f.Path, f.Entry, layout.TextAddr)
	}
	binary.LittleEndian.PutUint32(stub[1:], uint32(int32(rel)))
	entry := layout.TextAddr
	return f.Rewrite(&elfio.Addition{
		Layout:  layout,
		Text:    stub,
		Symbols: []elfio.NewSymbol{{Name: "kprewrite_entry_stub", Section: elfio.SecText, Size: stubLen, Func: true, Global: true}},
		Entry:   &entry,
	})
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 == nil && err2 == nil {
		return os.SameFile(sa, sb)
	}
	aa, _ := filepath.Abs(a)
	bb, _ := filepath.Abs(b)
	return aa == bb
}
