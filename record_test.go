package kprewrite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite"
)

// TestRecordProgramNoProbes: a program with no probes, given none, is ErrNoProbes and
// leaves no trace file; the options' program is found on PATH.
func TestRecordProgramNoProbes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.trace")
	_, err := kprewrite.RecordProgram(context.Background(), kprewrite.RecordOptions{Program: "true", Output: out})
	if !errors.Is(err, kprewrite.ErrNoProbes) {
		t.Errorf("RecordProgram(true): %v, want ErrNoProbes", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", out, err)
	}
}

// TestRecordProgramContext: a context that ends kills the program; the result holds
// its status (SIGKILL's 137) and the records written before, with the context's error.
// The program is a shell that runs a rewritten program: given no probes, RecordProgram
// runs what it is given.
func TestRecordProgramContext(t *testing.T) {
	dir := t.TempDir()
	kp := filepath.Join(dir, "example.kp")
	if _, err := kprewrite.Rewrite(build(dir), kp, kprewrite.RewriteOptions{Definitions: []string{"p:ex/add add"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := kprewrite.RecordProgram(ctx, kprewrite.RecordOptions{
		Program: "sh", Args: []string{"-c", `"$0" 3 && exec sleep 30`, kp}, Output: filepath.Join(dir, "t.trace"),
	})
	if !errors.Is(err, context.DeadlineExceeded) || res == nil {
		t.Fatalf("RecordProgram of a program that outlives its context: %v, %v", res, err)
	}
	if res.ExitCode != 137 || res.Records != 3 {
		t.Errorf("exit code %d, %d records; want 137 (SIGKILL) and the 3 written before", res.ExitCode, res.Records)
	}
}

// TestRecordsBounded: Records gives what ReadTrace gives, in the same order, and holds
// no more than a few MiB while it reads 300,000 records (ReadTrace holds them all).
func TestRecordsBounded(t *testing.T) {
	dir := t.TempDir()
	res, err := kprewrite.RecordProgram(context.Background(), kprewrite.RecordOptions{
		Program: build(dir), Args: []string{"300000"},
		Rewrite: kprewrite.RewriteOptions{Definitions: []string{"p:ex/add add a=%di:s32 b=%si:s32"}},
		Output:  filepath.Join(dir, "t.trace"), CacheDir: filepath.Join(dir, "cache"),
	})
	if err != nil || res.Records != 300000 || res.Lost != 0 {
		t.Fatalf("RecordProgram: %+v, %v", res, err)
	}
	runtime.GC()
	var base, now runtime.MemStats
	runtime.ReadMemStats(&base)
	peak, n := uint64(0), 0
	for r, err := range kprewrite.Records(res.Trace) {
		if err != nil {
			t.Fatal(err)
		}
		if a, _ := r.Field("a"); a != int64(n) || r.Event != "add" {
			t.Fatalf("record %d: %s %v", n, r.Event, r.Fields)
		}
		if n++; n%20000 == 0 {
			runtime.ReadMemStats(&now)
			peak = max(peak, now.HeapInuse)
		}
	}
	if n != 300000 {
		t.Errorf("Records gave %d records, want 300000", n)
	}
	if grew := int64(peak) - int64(base.HeapInuse); grew > 16<<20 {
		t.Errorf("the heap grew by %d MiB while reading, want at most 16", grew>>20)
	}
	tr, err := kprewrite.ReadTrace(res.Trace)
	if err != nil || len(tr.Records) != n {
		t.Fatalf("ReadTrace: %d records, %v", len(tr.Records), err)
	}
	i := 0
	for r := range kprewrite.Records(res.Trace) {
		if w := tr.Records[i]; r.Line != w.Line || r.Time != w.Time {
			t.Fatalf("record %d: Records %q, ReadTrace %q", i, r.Line, w.Line)
		}
		if i++; i == 1000 { // (breaking out of the loop ends the reading)
			break
		}
	}
}

// TestRecordsErrors: a file that is no trace is one error naming it.
func TestRecordsErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.trace")
	os.WriteFile(bad, []byte("not a trace file at all, but long enough to read a header from it...."), 0o644)
	n := 0
	for _, err := range kprewrite.Records(bad) {
		n++
		if err == nil {
			t.Errorf("a record from %s", bad)
		} else if !strings.Contains(err.Error(), bad) {
			t.Errorf("error %q does not name %s", err, bad)
		}
	}
	if n != 1 {
		t.Errorf("%d values from %s, want one error", n, bad)
	}
}
