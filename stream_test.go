package kprewrite_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kprewrite/kprewrite"
)

// TestEachRecordBoundedMemory: EachRecord reads a trace of 400,000 records in memory
// bounded by its threads (the heap after a collection stays under 16 MiB while it
// reads), where ReadTrace holds every record (issue 50, item 12: ~1 KB a record).
func TestEachRecordBoundedMemory(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	os.WriteFile(src, []byte(`#include <stdlib.h>
__attribute__((noinline)) long work(long a) { __asm__ volatile(""); return a; }
int main(int argc, char **argv) { long s = 0, n = atol(argv[1]); for (long i = 0; i < n; i++) s += work(i); return s == 0; }
`), 0o644)
	prog := filepath.Join(dir, "p")
	if out, err := exec.Command("gcc", "-O2", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "p.kp")
	if _, err := kprewrite.Rewrite(prog, out, kprewrite.RewriteOptions{Definitions: []string{"p:m/work work a=%di"}}); err != nil {
		t.Fatal(err)
	}
	const n = 400000
	if err := exec.Command(out, "400000").Run(); err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	peak, seen, next := uint64(0), 0, int64(0)
	tr, err := kprewrite.EachRecord(out+".trace", func(r *kprewrite.Record) error {
		if a, _ := r.Field("a"); a != uint64(next) {
			t.Fatalf("record %d: a=%v", seen, a)
		}
		next++
		if seen++; seen%100000 == 0 {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != n || len(tr.Records) != 0 || len(tr.Profile) != 1 || tr.Profile[0].Hits != n {
		t.Fatalf("%d records, %d kept, profile %+v; want %d, none kept, %d hits", seen, len(tr.Records), tr.Profile, n, n)
	}
	if peak > 16<<20 {
		t.Errorf("heap %d MiB while reading %d records: not bounded", peak>>20, n)
	}
}
