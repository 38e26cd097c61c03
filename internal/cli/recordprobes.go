package cli

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/infile"
	"github.com/kprewrite/kprewrite/internal/progcache"
	"github.com/kprewrite/kprewrite/internal/recorder"
)

// recordProgram is the program record runs for argv: with probes given, argv[0]'s
// rewrite in the cache (made there unless it is already), else argv[0] as exec finds
// it.
func recordProgram(opt *recordOptions, stderr io.Writer) (string, error) {
	prog, err := exec.LookPath(opt.argv[0])
	if err != nil || !opt.rw.probes() {
		return opt.argv[0], nil // (a program that is not found is the start's error)
	}
	ropt, err := opt.rw.options()
	if err != nil {
		return "", err
	}
	if err := notScript(opt.argv[0], prog); err != nil {
		return "", err
	}
	c, err := progcache.Default()
	if err != nil {
		return "", err
	}
	ropt.TracePath = "none" // the records go where the recorder says
	files := append(append([]string{}, ropt.DefinitionFiles...), ropt.HandlerFiles...)
	if ropt.DebugFile != "" {
		files = append(files, ropt.DebugFile)
	}
	var res *kprewrite.RewriteResult
	path, hit, err := c.Rewritten(prog, files, ropt, func(out string) ([]string, error) {
		if res, err = kprewrite.Rewrite(prog, out, ropt); err != nil {
			return nil, err
		}
		var libs []string
		for _, l := range res.Libraries {
			libs = append(libs, l.Input)
		}
		return libs, nil
	})
	if err != nil {
		return "", err
	}
	switch {
	case opt.quiet:
	case hit:
		fmt.Fprintf(stderr, "kprewrite record: %s: its rewrite from the cache (%s)\n", opt.argv[0], path)
	default:
		rewriteReport(stderr, "kprewrite record", res, len(ropt.Calls) > 0)
		fmt.Fprintf(stderr, "kprewrite record: %s: rewritten with %d probe(s) into the cache (%s)\n", opt.argv[0], len(res.Probes), path)
	}
	return path, nil
}

// notScript refuses a program that is a #! script (a pyenv shim, a wrapper): it is not
// what runs the code the probes name, its interpreter is. The error names the next
// program of that name on PATH that is no script, if there is one.
func notScript(name, path string) error {
	line := firstLine(path)
	if !strings.HasPrefix(line, "#!") {
		return nil
	}
	err := fmt.Errorf("%s (%s): a script (%s), not a program: give record the program that runs the code to probe", name, path, line)
	if strings.ContainsRune(name, '/') {
		return err
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if p != path && strings.HasPrefix(firstLine(p), "\x7fELF") {
			return fmt.Errorf("%w, such as %s", err, p)
		}
	}
	return err
}

// firstLine is the start of the file at path up to its first newline ("" if unread).
func firstLine(path string) string {
	f, err := infile.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 128)
	n, _ := io.ReadFull(f, b)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	return line
}

// rewriteFlagsAlone refuses rewrite options given to record without probes: they
// would change nothing.
func rewriteFlagsAlone(fs *flag.FlagSet, rw *rewriteFlags) error {
	if rw.probes() {
		return nil
	}
	names := map[string]bool{}
	for _, n := range rw.names() {
		names[n] = true
	}
	var set string
	fs.Visit(func(f *flag.Flag) {
		if names[f.Name] && f.Name != "clock" && set == "" { // (--clock: KPREWRITE_CLOCK for the program)
			set = f.Name
		}
	})
	if set != "" {
		return usageErr("--%s is a rewrite option: give the probes too (-e, -f, --calls or --handlers)", set)
	}
	return nil
}

// noProbes ends a recording in which no rewritten program joined the trace and none
// was asked for: the file, which holds nothing, is removed, and the error says why;
// the status is the program's when it failed, else 1.
func noProbes(rec *recorder.Recorder, opt *recordOptions, werr error, stderr io.Writer) error {
	rec.Discard()
	rec.Finish()
	err := fmt.Errorf("%s: no probes: it is no rewritten program and ran none, so nothing was recorded and %s is not written (give probes: -e DEF, -f DEFFILE, --calls GLOB or --handlers FILE.c)", opt.argv[0], opt.out)
	if rewritten(opt.argv[0]) {
		err = fmt.Errorf("%s: a rewritten program, but no runtime joined the trace, so nothing was recorded and %s is not written (a rewrite by another kprewrite version, whose trace files differ, does not: rewrite it again, or give the probes and record rewrites it)", opt.argv[0], opt.out)
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		fmt.Fprintf(stderr, "kprewrite record: %v\n", err)
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitStatus(128 + int(ws.Signal()))
		}
		return exitStatus(ee.ExitCode())
	}
	return err
}

// rewritten says whether the program exec finds as name is a rewritten binary (it has
// kprewrite's sections).
func rewritten(name string) bool {
	path, err := exec.LookPath(name)
	if err != nil {
		return false
	}
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Section(".kprewrite.text") != nil
}

// traceArg is the trace FILE of a command that reads one, from its positional
// arguments: DefaultRecordFile, which record writes, when none is given.
func traceArg(cmd string, pos []string) ([]string, error) {
	switch len(pos) {
	case 0:
		return []string{DefaultRecordFile}, nil
	case 1:
		return pos, nil
	}
	return nil, usageErr("want one trace FILE (default %s), got %d arguments (see kprewrite %s -h)", DefaultRecordFile, len(pos), cmd)
}
