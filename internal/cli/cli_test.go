package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRulesDocCurrent keeps docs/rules.md equal to what `kprewrite rules --markdown`
// prints, so the document cannot drift from the rule ids the analysis reports.
func TestRulesDocCurrent(t *testing.T) {
	want, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	writeRulesMarkdown(&got)
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("docs/rules.md is stale: run go run ./cmd/kprewrite rules --markdown > docs/rules.md")
	}
}

func TestParseFlagsInterspersed(t *testing.T) {
	fs := helpFlagSet("x", "x", &bytes.Buffer{})
	j := fs.Bool("json", false, "")
	var e multiFlag
	fs.Var(&e, "e", "")
	pos, err := parseFlags(fs, []string{"bin", "--json", "-e", "a", "other", "-e", "b", "--", "-notaflag"})
	if err != nil {
		t.Fatal(err)
	}
	if !*j || strings.Join(e, ",") != "a,b" || strings.Join(pos, ",") != "bin,other,-notaflag" {
		t.Errorf("json=%v e=%v pos=%v", *j, e, pos)
	}
}

func TestHelpAndVersion(t *testing.T) {
	var o, e bytes.Buffer
	if code := Main([]string{"help"}, &o, &e); code != ExitOK || !strings.Contains(o.String(), "check") {
		t.Errorf("help: %d %q", code, o.String())
	}
	o.Reset()
	if code := Main([]string{"check", "-h"}, &o, &e); code != ExitOK || !strings.Contains(o.String(), "-json") {
		t.Errorf("check -h: %d %q", code, o.String())
	}
	o.Reset()
	if code := Main([]string{"version"}, &o, &e); code != ExitOK || !strings.Contains(o.String(), Version) {
		t.Errorf("version: %d %q", code, o.String())
	}
	if code := Main(nil, &o, &e); code != ExitUsage {
		t.Errorf("no args: exit %d", code)
	}
}

// TestRewritten: record's error for a program that wrote nothing tells a rewritten
// program (kprewrite's sections) from another one: a binary with a .kprewrite.text
// section is one, /bin/sh and a missing program are not.
func TestRewritten(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "r.c"), filepath.Join(dir, "r")
	os.WriteFile(src, []byte(`__attribute__((section(".kprewrite.text"), used)) static void f(void) {}
int main(void) { return 0; }
`), 0o644)
	if out, err := exec.Command(gcc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v %s", err, out)
	}
	if !rewritten(bin) {
		t.Errorf("%s: not taken for a rewritten program", bin)
	}
	if rewritten("sh") || rewritten(filepath.Join(dir, "none")) {
		t.Errorf("sh or a missing program taken for a rewritten program")
	}
}
