// Package outfile keeps a command's output off its inputs: kprewrite never writes over
// a file it reads.
package outfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Same reports whether a and b name the same file: by os.SameFile when both exist (a
// hard link, a symbolic link, another spelling of the path), else by their absolute,
// cleaned paths.
func Same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 == nil && err2 == nil {
		return os.SameFile(sa, sb)
	}
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

// Check returns the error of every command whose output out is one of its inputs
// ("" inputs are skipped; an out of "" or "-", standard output, is never one).
func Check(out string, inputs ...string) error {
	if out == "" || out == "-" {
		return nil
	}
	for _, in := range inputs {
		if in != "" && Same(in, out) {
			return fmt.Errorf("output %s is the input %s: kprewrite never modifies its input", out, in)
		}
	}
	return nil
}
