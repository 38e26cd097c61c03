package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/internal/atomicfile"
	"github.com/kprewrite/kprewrite/internal/rewriter"
)

// writeAll writes the library copies first, then the program that loads them, each
// atomically; on an error none is left behind.
func writeAll(input, output string, res *rewriter.Result, copies []libraryCopy) error {
	var written []string
	undo := func() {
		for _, w := range written {
			os.Remove(w)
		}
		if len(copies) > 0 {
			os.Remove(libraryDir(output)) // only when empty
		}
	}
	for _, c := range copies {
		if err := os.MkdirAll(filepath.Dir(c.path), 0o777); err != nil {
			undo()
			return fmt.Errorf("library copies: %w", err)
		}
		if err := atomicfile.WriteFile(c.path, c.res.Image, outputMode(c.input)); err != nil {
			undo()
			return err
		}
		written = append(written, c.path)
	}
	if err := atomicfile.WriteFile(output, res.Image, outputMode(input)); err != nil {
		undo()
		return err
	}
	return nil
}

// outputMode is the mode a linker would give the output: read and write for all, and
// execute where the input has it, masked by the umask.
func outputMode(input string) os.FileMode {
	mode := os.FileMode(0o666)
	if st, err := os.Stat(input); err == nil {
		mode |= st.Mode().Perm() & 0o111
	}
	return mode &^ umask()
}

// umask reads the process's umask from /proc (Linux 4.7 and later) rather than
// setting it to read it back, which would race with other goroutines creating files.
func umask() os.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m) & 0o777
				}
			}
		}
	}
	return 0o022
}
