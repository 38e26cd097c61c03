package kprewrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kprewrite/kprewrite/internal/progcache"
	"github.com/kprewrite/kprewrite/internal/recorder"
)

// DefaultTrace is the trace file RecordProgram and `kprewrite record` write when given none,
// in the current directory, and the one `trace`, `report`, `hist`... read.
const DefaultTrace = "kprewrite.trace"

// ErrNoProbes is wrapped by RecordProgram's error when nothing it ran had probes: no
// definitions were given, and no rewritten program joined the trace.
var ErrNoProbes = errors.New("no probes")

// RecordOptions are what RecordProgram runs, with which probes, and where its records go:
// the arguments of `kprewrite record`.
type RecordOptions struct {
	// Program is the program to run: a path, or a name found on PATH as exec finds
	// it. Args are its arguments (without its name), Env its environment (nil: this
	// process's; KPREWRITE_TRACE is added), Dir its working directory ("": this
	// process's), Stdin, Stdout and Stderr its standard streams (nil: /dev/null).
	Program        string
	Args           []string
	Env            []string
	Dir            string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Rewrite are the probes. With Definitions, DefinitionFiles, HandlerFiles or
	// Calls, Program is rewritten into the cache (a rewrite there from the same
	// inputs and options is reused) and the rewrite runs, under Program's name;
	// without, Program must be a rewritten program or run one. TracePath is not
	// used: the records go to Output.
	Rewrite RewriteOptions
	// Output is the trace file (default DefaultTrace in the current directory); a
	// file there is kept as Output.old.
	Output string
	// BufferSize is the ring the program writes into, in memory shared with the
	// recorder (0: 32 MiB).
	BufferSize uint64
	// BufferMax is what the ring may grow to when the program outruns the recorder
	// (its writers make the new blocks present instead of losing records; 0: 16
	// times BufferSize, at most 512 MiB and a quarter of the memory available;
	// BufferSize: the ring does not grow).
	BufferMax uint64
	// CacheDir holds rewritten programs ("": $XDG_CACHE_HOME/kprewrite, else
	// ~/.cache/kprewrite, at most KPREWRITE_CACHE_MAX bytes, 2G by default).
	CacheDir string
}

// RecordResult is what a recording did.
type RecordResult struct {
	// ExitCode is the program's exit status, 128+N when signal N ended it.
	ExitCode int
	Trace    string // the trace file's absolute path
	Program  string // what ran: Program's rewrite in the cache, or Program
	Cached   bool   // the rewrite was in the cache already
	Records  uint64 // records written to Trace
	Lost     uint64 // records the program could not write: the ring was full
}

// RecordProgram runs a program, rewritten first when opt.Rewrite has probes, with its
// records going into a ring in memory that it copies into the trace file while the
// program runs (as `kprewrite record` does), and returns the program's exit status and
// the trace file, which ReadTrace and Records read. (It is not named Record: that is
// a trace record's type.) A program that does not start, a trace file that cannot be
// written, and nothing with probes run (ErrNoProbes; the file is removed) are errors.
// When ctx ends first, the program is killed and RecordProgram returns its result
// with ctx's error.
func RecordProgram(ctx context.Context, opt RecordOptions) (*RecordResult, error) {
	prog, err := exec.LookPath(opt.Program)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	res := &RecordResult{Program: prog}
	probes := hasProbes(&opt.Rewrite)
	if probes {
		if res.Program, res.Cached, err = cachedRewrite(prog, opt.Rewrite, opt.CacheDir); err != nil {
			return nil, err
		}
	}
	out := opt.Output
	if out == "" {
		out = DefaultTrace
	}
	if res.Trace, err = filepath.Abs(out); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	rec, err := recorder.Create(res.Trace, recorder.Options{BufferSize: opt.BufferSize, RingMax: opt.BufferMax, KeepOld: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", out, err)
	}
	images, err := runRecorded(ctx, rec, res, &opt)
	if err != nil {
		return nil, err
	}
	if images == 0 && !probes {
		return nil, fmt.Errorf("record: %s: %w: it is no rewritten program and ran none; give RewriteOptions definitions or Calls", opt.Program, ErrNoProbes)
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("record %s: %w", opt.Program, ctx.Err())
	}
	return res, nil
}

// hasProbes reports whether opt asks for probes, which a rewrite puts in.
func hasProbes(opt *RewriteOptions) bool {
	return len(opt.Definitions)+len(opt.DefinitionFiles)+len(opt.HandlerFiles)+len(opt.Calls) > 0
}

// cachedRewrite returns the path of prog's rewrite with opt in the cache at dir ("":
// the user's), rewriting it there when it is not, and whether it was there.
func cachedRewrite(prog string, opt RewriteOptions, dir string) (string, bool, error) {
	c, err := progcache.Default()
	if err != nil {
		return "", false, err
	}
	if dir != "" {
		c.Dir = dir
	}
	opt.TracePath = "none" // the records go where the recorder says
	files := append(append([]string{}, opt.DefinitionFiles...), opt.HandlerFiles...)
	if opt.DebugFile != "" {
		files = append(files, opt.DebugFile)
	}
	return c.Rewritten(prog, files, opt, func(out string) ([]string, error) {
		res, err := Rewrite(prog, out, opt)
		if err != nil {
			return nil, err
		}
		var libs []string
		for _, l := range res.Libraries {
			libs = append(libs, l.Input)
		}
		return libs, nil
	})
}

// runRecorded runs res.Program under the recorder rec until it exits, copying its
// records, and sets res's exit code and counts; it returns how many rewritten images
// joined the trace.
func runRecorded(ctx context.Context, rec *recorder.Recorder, res *RecordResult, opt *RecordOptions) (int, error) {
	cmd := exec.CommandContext(ctx, res.Program, opt.Args...)
	cmd.Args[0] = opt.Program // the program sees the name it was given
	cmd.Env = append(opt.Env, "KPREWRITE_TRACE="+res.Trace)
	if opt.Env == nil {
		cmd.Env = append(os.Environ(), cmd.Env...)
	}
	cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr = opt.Dir, opt.Stdin, opt.Stdout, opt.Stderr
	if err := cmd.Start(); err != nil {
		rec.Finish()
		os.Remove(res.Trace)
		return 0, fmt.Errorf("run %s: %w", opt.Program, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var werr error
	for done := false; !done; {
		select {
		case werr = <-exited:
			done = true
		case <-time.After(5 * time.Millisecond):
		}
		rec.Drain(done, false)
	}
	images := rec.Images()
	st := rec.Stats()
	res.Records, res.Lost, res.ExitCode = st.Records, st.Lost, exitCode(werr)
	gone := rec.Check()
	if images == 0 && !hasProbes(&opt.Rewrite) {
		rec.Discard()
	}
	if err := errors.Join(rec.Err(), rec.Finish(), gone); err != nil {
		return images, fmt.Errorf("%s: %w", res.Trace, err)
	}
	return images, nil
}

// exitCode is the status a shell gives for exec's Wait error.
func exitCode(werr error) int {
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}
