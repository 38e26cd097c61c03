// Package apiuser is another module using kprewrite's Go API as a test suite would:
// compile a C program, rewrite it with two events, run it, and assert on the typed
// records of its trace. The main module's TestExternalModule runs it.
package apiuser

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kprewrite/kprewrite"
)

const src = `
#include <stdio.h>
#include <string.h>

long calls;

__attribute__((noinline)) long greet(const char *name, long n)
{
	calls++;
	return (long)strlen(name) * n;
}

int main(void)
{
	const char *names[] = {"ada", "grace", "linus"};
	long sum = 0;
	for (int i = 0; i < 3; i++)
		sum += greet(names[i], i - 1);
	printf("%ld\n", sum);
	return 0;
}
`

func TestRewriteRunRead(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "greet.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "greet")
	if out, err := exec.Command("gcc", "-O2", "-o", prog, filepath.Join(dir, "greet.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	report, err := kprewrite.Check(prog, kprewrite.CheckOptions{Definitions: []string{"p:api/greet greet"}})
	if err != nil || len(report.Sites) != 1 || report.Sites[0].Function != "greet" {
		t.Fatalf("Check: %+v, %v", report, err)
	}

	out := filepath.Join(dir, "greet.kp")
	res, err := kprewrite.Rewrite(prog, out, kprewrite.RewriteOptions{Definitions: []string{
		"p:api/greet greet name=+0(%di):string n=%si:s64",
		"r:api/greet_ret greet len=$retval:s64",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Probes) != 2 || res.Probes[0].Event != "api/greet" || res.Probes[1].Event != "api/greet_ret" {
		t.Fatalf("probes %+v", res.Probes)
	}
	want, err := exec.Command(prog).Output()
	if err != nil || string(want) != "2\n" {
		t.Fatalf("the original printed %q (%v)", want, err)
	}
	got, err := exec.Command(out).Output()
	if err != nil || string(got) != string(want) {
		t.Fatalf("rewritten program printed %q (%v), want the original's %q", got, err, want)
	}

	tr, err := kprewrite.ReadTrace(out + ".trace")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Records) != 6 || tr.Lost != 0 || tr.Undescribed != 0 {
		t.Fatalf("%d records, %d lost, %d undescribed; want 6, 0, 0", len(tr.Records), tr.Lost, tr.Undescribed)
	}
	names := []string{"ada", "grace", "linus"}
	for i, r := range tr.Records {
		call := i / 2
		if r.Comm != "greet.kp" || r.PID == 0 || r.TID != r.PID || r.Time <= 0 {
			t.Errorf("record %d: comm %q pid %d tid %d time %v", i, r.Comm, r.PID, r.TID, r.Time)
		}
		if i > 0 && r.Time < tr.Records[i-1].Time {
			t.Errorf("record %d goes back in time", i)
		}
		if i%2 == 0 {
			name, _ := r.Field("name")
			n, _ := r.Field("n")
			if r.Event != "greet" || r.Return || name != names[call] || n != int64(call-1) {
				t.Errorf("record %d: %s return=%v name=%#v n=%#v, want greet %q %d", i, r.Event, r.Return, name, n, names[call], call-1)
			}
			continue
		}
		l, _ := r.Field("len")
		if want := int64(len(names[call]) * (call - 1)); r.Event != "greet_ret" || !r.Return || l != want || r.RetAddr == 0 {
			t.Errorf("record %d: %s return=%v len=%#v ret=%#x, want greet_ret %d", i, r.Event, r.Return, l, r.RetAddr, want)
		}
	}
	var hits uint64
	for _, p := range tr.Profile {
		hits += p.Hits
	}
	if hits != 6 {
		t.Errorf("profile %+v: %d hits, want 6", tr.Profile, hits)
	}
}

// TestHistReport: the histogram a hist trigger kept and the per-function report, as
// data, from another module.
func TestHistReport(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "greet.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	prog, out := filepath.Join(dir, "greet"), filepath.Join(dir, "greet.kp")
	if o, err := exec.Command("gcc", "-O2", "-o", prog, filepath.Join(dir, "greet.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, o)
	}
	_, err := kprewrite.Rewrite(prog, out, kprewrite.RewriteOptions{
		Definitions: []string{"p:api/greet greet n=%si:s64"},
		Triggers:    []string{"api/greet:hist:keys=n:sort=n"},
		Calls:       []string{"greet"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command(out).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", out, err, o)
	}
	hs, err := kprewrite.Hist(out+".trace", kprewrite.HistOptions{Event: "api/greet"})
	if err != nil {
		t.Fatal(err)
	}
	var keys []any
	for _, e := range hs[0].Entries {
		keys = append(keys, e.Key[0])
	}
	if len(hs) != 1 || len(keys) != 3 || keys[0] != int64(-1) || keys[1] != int64(0) || keys[2] != int64(1) {
		t.Errorf("histogram keys %v, want n -1, 0 and 1:\n%s", keys, hs)
	}
	rep, err := kprewrite.Report(out+".trace", kprewrite.ReportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Funcs) != 1 || rep.Funcs[0].Func != "greet" || rep.Funcs[0].Calls != 3 {
		t.Errorf("report %+v, want greet's 3 calls:\n%s", rep.Funcs, rep)
	}
}
