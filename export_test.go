package kprewrite_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/cli"
)

// nested is a program whose calls nest: main calls outer argv[1] times, outer calls
// inner(0), inner(1), inner(2).
const nested = `#include <stdlib.h>
volatile int calls; /* so that the calls are not folded */
__attribute__((noinline, noclone)) int inner(int v) { calls++; return v * 3; }
__attribute__((noinline, noclone)) int outer(int n)
{
	int s = 0;
	for (int i = 0; i < n; i++)
		s += inner(i);
	return s;
}
int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1, s = 0;
	for (int i = 0; i < n; i++)
		s += outer(3);
	return s == 9 * n ? 0 : 1;
}
`

// recordNested records nested run with n under --calls on every function and an
// event on inner with a histogram of its argument, and returns the trace file.
func recordNested(t *testing.T, n string) string {
	t.Helper()
	dir := t.TempDir()
	src, prog := filepath.Join(dir, "nested.c"), filepath.Join(dir, "nested")
	if err := os.WriteFile(src, []byte(nested), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-o", prog, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v\n%s", err, out)
	}
	res, err := kprewrite.RecordProgram(context.Background(), kprewrite.RecordOptions{
		Program: prog, Args: []string{n},
		Rewrite: kprewrite.RewriteOptions{
			Definitions: []string{"p:ex/inner inner v=%di:s32 w=%di:u64"},
			Triggers:    []string{"ex/inner:hist:keys=v:vals=w"},
			Calls:       []string{"main", "outer", "inner"},
		},
		Output: filepath.Join(dir, "nested.trace"), CacheDir: filepath.Join(dir, "cache"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("nested %s: exit status %d", n, res.ExitCode)
	}
	return res.Trace
}

// runCLI runs kprewrite in-process and returns its standard output.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := cli.Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("kprewrite %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

// TestHist: the histogram's entries are the program's calls (inner's argument 0, 1
// and 2, each once per call of outer, with the sums of a value), and String is what
// `kprewrite hist` prints.
func TestHist(t *testing.T) {
	tr := recordNested(t, "50")
	hs, err := kprewrite.Hist(tr, kprewrite.HistOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 {
		t.Fatalf("%d histograms, want 1", len(hs))
	}
	h := hs[0]
	if h.Group != "ex" || h.Event != "inner" || strings.Join(h.Keys, ",") != "v" || h.Hits != 150 || h.Dropped != 0 {
		t.Errorf("histogram %s/%s keys %v hits %d dropped %d, want ex/inner keys [v] hits 150 dropped 0", h.Group, h.Event, h.Keys, h.Hits, h.Dropped)
	}
	if strings.Join(h.Vals, ",") != "w" {
		t.Errorf("values %v, want [w]", h.Vals)
	}
	got := map[int64]string{}
	for _, e := range h.Entries {
		got[e.Key[0].(int64)] = fmt.Sprint(e.Hitcount, e.Vals)
	}
	if len(got) != 3 || got[0] != "50 [0]" || got[1] != "50 [50]" || got[2] != "50 [100]" {
		t.Errorf("entries %v, want v 0, 1 and 2 with hitcount 50 each, w summing to 50 v", got)
	}
	if cl := runCLI(t, "hist", tr); hs.String() != cl || h.String() != cl {
		t.Errorf("Hist's text:\n%s\nkprewrite hist's:\n%s", hs, cl)
	}
	if !strings.Contains(h.String(), "{ v:          1 } hitcount:         50") {
		t.Errorf("hist text has no line for v 1:\n%s", h)
	}
}

// TestHistErrors: an event with no hist trigger, an event that does not exist and a
// file that is not there are errors naming the file.
func TestHistErrors(t *testing.T) {
	tr := recordNested(t, "1")
	for _, c := range []struct{ path, event, want string }{
		{tr, "calls/outer", "no hist trigger on calls/outer"},
		{tr, "ex/nothing", "no event ex/nothing"},
		{tr + ".missing", "", "no such file"},
	} {
		_, err := kprewrite.Hist(c.path, kprewrite.HistOptions{Event: c.event})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Base(c.path)) {
			t.Errorf("Hist(%s, %q): %v, want an error naming the file and saying %q", filepath.Base(c.path), c.event, err, c.want)
		}
	}
}

// TestExportMatchesCLI: each format is the bytes of the command that writes it; an
// unknown format and a missing file are errors.
func TestExportMatchesCLI(t *testing.T) {
	tr := recordNested(t, "20")
	for _, c := range []struct {
		format kprewrite.ExportFormat
		opt    kprewrite.ExportOptions
		args   []string
	}{
		{kprewrite.FormatChrome, kprewrite.ExportOptions{}, []string{"trace", "--format", "chrome"}},
		{kprewrite.FormatJSONL, kprewrite.ExportOptions{}, []string{"trace", "--format", "json"}},
		{kprewrite.FormatPprof, kprewrite.ExportOptions{}, []string{"profile", "--format", "pprof"}},
		{kprewrite.FormatFolded, kprewrite.ExportOptions{}, []string{"flamegraph", "--format", "folded"}},
		{kprewrite.FormatFolded, kprewrite.ExportOptions{Threads: true}, []string{"flamegraph", "--format", "folded", "--threads"}},
		{kprewrite.FormatFlameSVG, kprewrite.ExportOptions{}, []string{"flamegraph"}},
		{kprewrite.FormatFlameSVG, kprewrite.ExportOptions{Title: "T"}, []string{"flamegraph", "--title", "T"}},
	} {
		var b bytes.Buffer
		if err := kprewrite.Export(tr, &b, c.format, c.opt); err != nil {
			t.Errorf("Export %s: %v", c.format, err)
			continue
		}
		want := runCLI(t, append(c.args, tr)...)
		if b.Len() == 0 || b.String() != want {
			t.Errorf("Export %s %+v: %d bytes, kprewrite %s: %d bytes, not the same", c.format, c.opt, b.Len(), strings.Join(c.args, " "), len(want))
		}
	}
	var b bytes.Buffer
	if err := kprewrite.Export(tr, &b, "svgz", kprewrite.ExportOptions{}); err == nil || !strings.Contains(err.Error(), `unknown format "svgz"`) {
		t.Errorf("Export svgz: %v, want an unknown format error", err)
	}
	missing := tr + ".missing"
	if err := kprewrite.Export(missing, &b, kprewrite.FormatChrome, kprewrite.ExportOptions{}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Export of a missing file: %v, want an error naming it", err)
	}
	if _, err := kprewrite.Report(missing, kprewrite.ReportOptions{}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Report of a missing file: %v, want an error naming it", err)
	}
}

// TestReport: the report counts the program's calls, String is what `kprewrite
// report` prints, per function and per thread, under each sort, and Diff what
// `report --diff` prints.
func TestReport(t *testing.T) {
	tr := recordNested(t, "20")
	rep, err := kprewrite.Report(tr, kprewrite.ReportOptions{Sort: "calls"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range rep.Funcs {
		got = append(got, fmt.Sprintf("%s:%d", f.Func, f.Calls))
		if f.Self > f.Total || f.Min > f.Max || f.Total <= 0 {
			t.Errorf("%s: total %v self %v min %v max %v", f.Func, f.Total, f.Self, f.Min, f.Max)
		}
	}
	if strings.Join(got, " ") != "inner:60 outer:20 main:1" {
		t.Errorf("calls %v, want inner:60 outer:20 main:1", got)
	}
	for _, c := range []struct {
		opt  kprewrite.ReportOptions
		args []string
	}{
		{kprewrite.ReportOptions{}, nil},
		{kprewrite.ReportOptions{Sort: "self"}, []string{"-s", "self"}},
		{kprewrite.ReportOptions{Sort: "func", Threads: true}, []string{"-s", "func", "--threads"}},
	} {
		rep, err := kprewrite.Report(tr, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		if want := runCLI(t, append(append([]string{"report"}, c.args...), tr)...); rep.String() != want {
			t.Errorf("Report %+v:\n%s\nkprewrite report %v:\n%s", c.opt, rep, c.args, want)
		}
	}
	baseTrace := recordNested(t, "5")
	base, err := kprewrite.Report(baseTrace, kprewrite.ReportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = kprewrite.Report(tr, kprewrite.ReportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := runCLI(t, "report", "--diff", baseTrace, tr)
	if d := rep.Diff(base); d != want || !strings.Contains(d, "Calls base") {
		t.Errorf("Diff:\n%s\nkprewrite report --diff:\n%s", d, want)
	}
	if _, err := kprewrite.Report(tr, kprewrite.ReportOptions{Sort: "size"}); err == nil || !strings.Contains(err.Error(), `unknown sort key "size"`) {
		t.Errorf("Report sorted by size: %v, want an unknown sort key error", err)
	}
}
