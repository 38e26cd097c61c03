package evfilter

import (
	"errors"
	"testing"
)

// FuzzParse: no input panics the parser; an accepted filter compiles to a program
// Check accepts and Match runs; a refusal is an *Error whose caret is inside the text.
func FuzzParse(f *testing.F) {
	for _, e := range oracleExprs {
		f.Add(e)
	}
	for e := range matchExprs {
		f.Add(e)
	}
	fields, _ := testFields(f)
	env := matchEnv()
	f.Fuzz(func(t *testing.T, expr string) {
		flt, err := Parse(expr, fields, fSyms{})
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("%q: %T %v", expr, err, err)
			}
			if c := pe.Column(); c > len(pe.Expr) {
				t.Fatalf("%q: caret at %d", expr, c)
			}
			_ = pe.FilterFile()
			return
		}
		prog := flt.Program()
		if err := Check(prog); err != nil {
			t.Fatalf("%q: its program fails Check", expr)
		}
		Match(prog, env)
		Match(prog, &Env{})
	})
}

// FuzzMatch: Match never panics on any bytes, as the runtime's evaluator must not crash
// on any program its start-up check lets through.
func FuzzMatch(f *testing.F) {
	fields, _ := testFields(f)
	for e := range matchExprs {
		if flt, err := Parse(e, fields, fSyms{}); err == nil {
			f.Add(flt.Program(), matchEnv().Data)
		}
	}
	f.Fuzz(func(t *testing.T, prog, data []byte) {
		env := matchEnv()
		env.Data = data
		Match(prog, env)
	})
}
