package handlers

import (
	"context"
	"os/exec"
	"testing"
)

// seedObjects compiles the test handler files (when gcc is there) for the fuzz corpora.
func seedObjects(f *testing.F) [][]byte {
	if _, err := exec.LookPath("gcc"); err != nil {
		return nil
	}
	set, err := Compile(context.Background(), write(f, "good.c", goodHandlers, "second.c", secondHandlers), Options{})
	if err != nil {
		f.Fatal(err)
	}
	out := [][]byte{set.Support}
	for _, u := range set.Units {
		out = append(out, u.Object)
	}
	return out
}

// FuzzParseObject feeds ParseObject real handler objects and mutations of them: it must
// never panic, and what it accepts must give probes whose sites parse.
func FuzzParseObject(f *testing.F) {
	for _, o := range seedObjects(f) {
		f.Add(o)
	}
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, obj []byte) {
		u, err := ParseObject("fuzz.c", obj)
		if err != nil {
			return
		}
		for _, p := range u.Probes {
			if _, err := p.Event(); err != nil {
				t.Errorf("accepted probe %+v whose site does not parse: %v", p, err)
			}
		}
	})
}

// FuzzParseDecls checks the declaration-line parser on arbitrary bytes.
func FuzzParseDecls(f *testing.F) {
	f.Add([]byte("kprobe\tkp\tdo_work+4\th.c\t12\x00kretprobe\trp\tdo_work\th.c\t13\x00\x00\x00extern\tcounter\t\th.c\t3\x00"))
	f.Add([]byte("kprobe\tkp\t\th.c\t1\x00"))
	f.Add([]byte("bogus"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := parseDecls(b)
		if err != nil {
			return
		}
		for _, d := range ds {
			if !isIdent(d.name) || d.line < 0 || (d.kind != kindExtern && d.site == "") {
				t.Errorf("accepted %+v", d)
			}
		}
	})
}
