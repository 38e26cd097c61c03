package kprewrite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kprewrite/kprewrite"
)

// build compiles testdata/example.c into dir (gcc is needed at test time only).
func build(dir string) string {
	prog := filepath.Join(dir, "example")
	if out, err := exec.Command("gcc", "-O1", "-o", prog, "testdata/example.c").CombinedOutput(); err != nil {
		log.Fatalf("gcc: %v\n%s", err, out)
	}
	return prog
}

// Check tells whether a probe on add's entry can be jump-optimized.
func ExampleCheck() {
	dir, _ := os.MkdirTemp("", "kprewrite-example")
	defer os.RemoveAll(dir)
	prog := build(dir)

	report, err := kprewrite.Check(prog, kprewrite.CheckOptions{Definitions: []string{"p:ex/add add a=%di:s32"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range report.Sites {
		fmt.Println(s.Event, s.Function, s.Verdict)
	}
	// Output: ex/add add optimize
}

// Rewrite a program with an entry and a return event, run it, and read its trace.
func ExampleRewrite() {
	dir, _ := os.MkdirTemp("", "kprewrite-example")
	defer os.RemoveAll(dir)
	prog := build(dir)

	out := filepath.Join(dir, "example.kp")
	res, err := kprewrite.Rewrite(prog, out, kprewrite.RewriteOptions{Definitions: []string{
		"p:ex/add add a=%di:s32 b=%si:s32",
		"r:ex/add_ret add ret=$retval:s32",
	}})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range res.Probes {
		fmt.Println(p.Event, p.Kind, p.Symbol)
	}
	if err := exec.Command(out, "3").Run(); err != nil {
		log.Fatal(err)
	}
	tr, err := kprewrite.ReadTrace(out + ".trace")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range tr.Records {
		fmt.Println(r.Event, r.Fields)
	}
	// Output:
	// ex/add o add
	// ex/add_ret ro add
	// add [{a 0} {b 1}]
	// add_ret [{ret 1}]
	// add [{a 1} {b 2}]
	// add_ret [{ret 3}]
	// add [{a 2} {b 3}]
	// add_ret [{ret 5}]
}

// RecordProgram rewrites a program with an event into a cache, runs it under the
// recorder, and Records reads its trace back one record at a time.
func ExampleRecordProgram() {
	dir, _ := os.MkdirTemp("", "kprewrite-example")
	defer os.RemoveAll(dir)
	prog := build(dir)

	res, err := kprewrite.RecordProgram(context.Background(), kprewrite.RecordOptions{
		Program:  prog,
		Args:     []string{"3"},
		Rewrite:  kprewrite.RewriteOptions{Definitions: []string{"r:ex/add_ret add ret=$retval:s32"}},
		Output:   filepath.Join(dir, "example.trace"),
		CacheDir: filepath.Join(dir, "cache"), // (default: the user's, ~/.cache/kprewrite)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit status", res.ExitCode, "records", res.Records)
	for r, err := range kprewrite.Records(res.Trace) {
		if err != nil {
			log.Fatal(err)
		}
		ret, _ := r.Field("ret")
		fmt.Println(r.Comm, r.Event, ret)
	}
	// Output:
	// exit status 0 records 3
	// example add_ret 1
	// example add_ret 3
	// example add_ret 5
}

// Records reads a trace of any length in bounded memory: here, the sum of add's
// arguments over 100,000 calls, without holding the records.
func ExampleRecords() {
	dir, _ := os.MkdirTemp("", "kprewrite-example")
	defer os.RemoveAll(dir)
	prog := build(dir)

	res, err := kprewrite.RecordProgram(context.Background(), kprewrite.RecordOptions{
		Program:  prog,
		Args:     []string{"100000"},
		Rewrite:  kprewrite.RewriteOptions{Definitions: []string{"p:ex/add add a=%di:s32"}},
		Output:   filepath.Join(dir, "example.trace"),
		CacheDir: filepath.Join(dir, "cache"),
	})
	if err != nil {
		log.Fatal(err)
	}
	var n, sum int64
	for r, err := range kprewrite.Records(res.Trace) {
		if err != nil {
			log.Fatal(err)
		}
		a, _ := r.Field("a")
		n, sum = n+1, sum+a.(int64)
	}
	fmt.Println(n, "calls, sum of a:", sum)
	// Output: 100000 calls, sum of a: 4999950000
}

// recordExample records the example program run with n under opt, for the examples
// of what reads a trace file.
func recordExample(dir, n string, opt kprewrite.RewriteOptions) string {
	res, err := kprewrite.RecordProgram(context.Background(), kprewrite.RecordOptions{
		Program:  build(dir),
		Args:     []string{n},
		Rewrite:  opt,
		Output:   filepath.Join(dir, "example.trace"),
		CacheDir: filepath.Join(dir, "cache"),
	})
	if err != nil {
		log.Fatal(err)
	}
	return res.Trace
}

// Hist reads the histogram a hist trigger kept while the program ran: here, add's
// first argument in log2 buckets over 100 calls, as data and as `kprewrite hist`
// prints it.
func ExampleHist() {
	dir, _ := os.MkdirTemp("", "kprewrite-example")
	defer os.RemoveAll(dir)
	trace := recordExample(dir, "100", kprewrite.RewriteOptions{
		Definitions: []string{"p:ex/add add a=%di:s32"},
		Triggers:    []string{"ex/add:hist:keys=a.log2:sort=a"},
	})

	hs, err := kprewrite.Hist(trace, kprewrite.HistOptions{Event: "ex/add"})
	if err != nil {
		log.Fatal(err)
	}
	h := hs[0]
	fmt.Println(h.Group, h.Event, h.Keys, len(h.Entries), "entries,", h.Hits, "hits")
	fmt.Print(h)
	// Output:
	// ex add [a.log2] 8 entries, 100 hits
	// # event histogram
	// #
	// # trigger info: hist:keys=a.log2:vals=hitcount:sort=a.log2:size=2048 [active]
	// #
	//
	// { a: ~ 2^0  } hitcount:          2
	// { a: ~ 2^1  } hitcount:          1
	// { a: ~ 2^2  } hitcount:          2
	// { a: ~ 2^3  } hitcount:          4
	// { a: ~ 2^4  } hitcount:          8
	// { a: ~ 2^5  } hitcount:         16
	// { a: ~ 2^6  } hitcount:         32
	// { a: ~ 2^7  } hitcount:         35
	//
	// Totals:
	//     Hits: 100
	//     Entries: 8
	//     Dropped: 0
}

// Export writes what other tools read; here the folded stacks of flamegraph.pl,
// their self nanoseconds left out (they differ from run to run).
func ExampleExport() {
	dir, _ := os.MkdirTemp("", "kprewrite-example")
	defer os.RemoveAll(dir)
	trace := recordExample(dir, "3", kprewrite.RewriteOptions{Calls: []string{"main", "add"}})

	var folded strings.Builder
	if err := kprewrite.Export(trace, &folded, kprewrite.FormatFolded, kprewrite.ExportOptions{}); err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(folded.String()), "\n") {
		stack, _, _ := strings.Cut(line, " ")
		fmt.Println(stack)
	}
	// Output:
	// main
	// main;add
}

// Report sums the calls per function, with their total and self times, as
// `kprewrite report` prints them (String).
func ExampleReport() {
	dir, _ := os.MkdirTemp("", "kprewrite-example")
	defer os.RemoveAll(dir)
	trace := recordExample(dir, "1000", kprewrite.RewriteOptions{Calls: []string{"main", "add"}})

	rep, err := kprewrite.Report(trace, kprewrite.ReportOptions{Sort: "calls"})
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range rep.Funcs {
		fmt.Println(f.Func, f.Calls, f.Self <= f.Total)
	}
	// Output:
	// add 1000 true
	// main 1 true
}
