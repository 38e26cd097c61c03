package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/cleanup"
	"github.com/kprewrite/kprewrite/internal/infile"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/recorder"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// exitStatus is a status record passes on: the recorded program's.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

var debugRecord = os.Getenv("KPREWRITE_RECORD_DEBUG") != ""

// DefaultRecordFile is where record writes without -o.
const DefaultRecordFile = "kprewrite.trace"

func runRecord(args []string, stdout, stderr io.Writer) error {
	opt, err := parseRecordArgs(args, stdout)
	if err != nil {
		return err
	}
	if err := outfile.Check(opt.out, append(recordInputs(opt.argv), opt.rw.inputs()...)...); err != nil {
		return err
	}
	prog, err := recordProgram(opt, stderr)
	if err != nil {
		return err
	}
	path, err := filepath.Abs(opt.out)
	if err != nil {
		return err
	}
	rec, err := recorder.Create(path, recorder.Options{BufferSize: opt.size, RingMax: opt.sizeMax, BlockSize: opt.blockSize, Overwrite: opt.overwrite, KeepOld: true})
	if err != nil {
		return fmt.Errorf("%s: %w", opt.out, err)
	}
	cmd, stdout, stderr := recordedCommand(prog, opt.argv, path, stdout, stderr)
	if c := *opt.rw.clock; c != "" { // a program rewritten before takes it too
		cmd.Env = append(cmd.Env, "KPREWRITE_CLOCK="+c)
	}
	// the terminal's signals reach the program; the recorder stays to copy what it
	// wrote until it has exited
	sigs := make(chan os.Signal, 4)
	cleanup.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR2) // (not those ignored at start)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		mine := rec.Check() == nil // (not another file put there meanwhile)
		rec.Finish()
		if mine {
			os.Remove(path)
		}
		return fmt.Errorf("run %s: %w", opt.argv[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// (with --live the records shown are the progress)
	r := &recordRun{rec: rec, cmd: cmd, opt: opt, progress: newRecordProgress(stderr, opt.quiet || opt.live), stdout: stdout, stderr: stderr}
	var liveStop, liveDone chan struct{}
	if opt.live {
		r.follow = tracefile.NewFollower(path, nil)
		r.follow.ChunksOnly = true // (showLive runs beside the copying)
		// a reader of the records that goes away (record --live | head -1) is EPIPE,
		// not the recorder's death by SIGPIPE, which left its program running with no
		// one to copy its records: the records go on to the file, the program runs on
		pipe := make(chan os.Signal, 1)
		signal.Notify(pipe, syscall.SIGPIPE)
		defer signal.Stop(pipe)
		liveStop, liveDone = make(chan struct{}), make(chan struct{})
		go r.showLive(liveStop, liveDone)
	}
	werr := r.copyRecords(exited, sigs)
	rec.Drain(true, false)
	if opt.live {
		close(liveStop) // everything shown, then done
		<-liveDone
	}
	r.progress.clear()
	gone := rec.Check() // the path still names the file written?
	if gone == nil && rec.Images() == 0 && !opt.rw.probes() {
		return noProbes(rec, opt, werr, stderr)
	}
	ferr := rec.Finish()
	recordSummary(stderr, rec, opt, gone, ferr)
	return recordedExit(werr, rec, opt.argv[0], gone)
}

// recordOptions are record's flags and the program to run.
type recordOptions struct {
	out             string
	size, blockSize uint64
	sizeMax         uint64 // --buffer-max (0: the default)
	overwrite       bool
	live, quiet     bool
	rw              *rewriteFlags // the probes to put in the program, and rewrite's options
	argv            []string
}

// parseRecordArgs reads record's command line: the flags, then the program and its
// arguments.
func parseRecordArgs(args []string, stdout io.Writer) (*recordOptions, error) {
	fs := helpFlagSet("record", "record [-e DEF]... [-f DEFFILE]... [--calls GLOB]... [--filter GROUP/EVENT:EXPR]... [--trigger GROUP/EVENT:TRIGGER]... [--handlers FILE.c]... [rewrite options] [-o FILE] [--buffer-size SIZE] [--buffer-max SIZE] [--block-size SIZE] [--overwrite] [--live] [-q] [--] PROGRAM [ARGS]...", stdout)
	out := fs.String("o", DefaultRecordFile, "the trace file to write (a regular file there is kept as FILE.old; locked while written: a second record of it is refused)")
	rw := addRewriteFlags(fs, false)
	bufSize := fs.String("buffer-size", "32M", "the ring the programs write into, in memory shared with the recorder (K, M, G suffixes)")
	bufMax := fs.String("buffer-max", "", "what the ring may grow to when the programs outrun the recorder: a writer that finds it full makes a new block present itself instead of losing its record (default 16 times --buffer-size, at most 512M and a quarter of the memory available; --buffer-size's value: no growth)")
	blockSize := fs.String("block-size", "64K", "the size of each ring block a thread writes into (a power of two from 8K)")
	over := fs.Bool("overwrite", false, "keep only the most recent records, as much as the buffer holds (a flight recorder); SIGUSR2 to the recorder copies what the ring holds")
	live := fs.Bool("live", false, "print records as they arrive, as trace --follow does")
	quiet := fs.Bool("q", false, "no summary and no progress on standard error")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return nil, flagErr(fs, err)
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return nil, usageErr("want a PROGRAM to run (see kprewrite record -h)")
	}
	size, err := parseSize(*bufSize)
	if err != nil {
		return nil, usageErr("--buffer-size: %v", err)
	}
	bsize, err := parseSize(*blockSize)
	if err != nil {
		return nil, usageErr("--block-size: %v", err)
	}
	var bmax uint64
	if *bufMax != "" {
		if bmax, err = parseSize(*bufMax); err != nil {
			return nil, usageErr("--buffer-max: %v", err)
		}
		if bmax < size {
			return nil, usageErr("--buffer-max %s: less than --buffer-size %s", *bufMax, *bufSize)
		}
		if *over {
			return nil, usageErr("--buffer-max: an --overwrite ring keeps its --buffer-size")
		}
	}
	if err := rewriteFlagsAlone(fs, rw); err != nil {
		return nil, err
	}
	if c := *rw.clock; c != "" && !slices.Contains(kprewrite.Clocks, c) {
		return nil, usageErr("--clock %s: want tsc, mono or counter", c)
	}
	return &recordOptions{out: *out, size: size, sizeMax: bmax, blockSize: bsize, overwrite: *over, live: *live, quiet: *quiet, rw: rw, argv: argv}, nil
}

// recordedCommand is the program to record (prog: argv[0] or its rewrite), told the
// trace file's path (KPREWRITE_TRACE), to write into it whatever its ancestry
// (KPREWRITE_APPEND) and to be quiet about it (KPREWRITE_QUIET), with the terminal as
// its standard streams; writers that are not
// the process's own are shared with --live's output, so they get a lock (the
// returned stdout and stderr are what record writes to from then on).
func recordedCommand(prog string, argv []string, path string, stdout, stderr io.Writer) (*exec.Cmd, io.Writer, io.Writer) {
	cmd := exec.Command(prog, argv[1:]...)
	cmd.Args[0] = argv[0] // a rewrite in the cache runs under the name it was given
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if stdout != io.Writer(os.Stdout) {
		// the program's output is copied by another goroutine while --live writes too
		stdout = &lockedWriter{w: stdout}
		cmd.Stdout = stdout
	}
	if stderr != io.Writer(os.Stderr) {
		stderr = &lockedWriter{w: stderr}
		cmd.Stderr = stderr
	}
	// quiet: record says where the trace goes. Its programs join the recorder's run
	// (the trace header's recorder_pid is their ancestor); appending, they join it
	// also when orphaned (the recorder killed), never moving its file to .old.
	cmd.Env = append(os.Environ(), "KPREWRITE_TRACE="+path, "KPREWRITE_QUIET=1", "KPREWRITE_APPEND=1")
	return cmd, stdout, stderr
}

// recordRun is a recording under way: the recorder, the program, the options, and
// what shows the records (--live) and the progress on the way.
type recordRun struct {
	rec            *recorder.Recorder
	cmd            *exec.Cmd
	opt            *recordOptions
	follow         *tracefile.Follower
	progress       *recordProgress
	stdout, stderr io.Writer
}

// copyRecords copies the ring into the trace file until the program exits, and
// returns how it ended (cmd.Wait's error). It drains again at once while there is
// much to copy and backs off to 10 ms when idle; it passes the terminal's signals on
// to the program, and on SIGUSR2 or an overwrite ring's snapshot copies what the ring
// holds.
func (r *recordRun) copyRecords(exited <-chan error, sigs <-chan os.Signal) error {
	rec, cmd, opt, stderr := r.rec, r.cmd, r.opt, r.stderr
	idle := time.Millisecond
	start := time.Now()
	var werr error
	snaps := rec.Snapshots()
	for done := false; !done; {
		select {
		case werr = <-exited:
			done = true
		case s := <-sigs:
			if s == syscall.SIGUSR2 {
				rec.Drain(false, true)
			} else if cmd.Process != nil {
				cmd.Process.Signal(s) // e.g. kill -TERM to the recorder alone
			}
			continue
		case <-time.After(idle):
		}
		if n := rec.Snapshots(); opt.overwrite && n != snaps { // a snapshot: the ring's records up to it
			snaps = n
			rec.Drain(false, true)
		}
		// drain again at once while there is much to copy; back off to 10 ms when idle
		t0 := time.Now()
		n := rec.Drain(done, false)
		if debugRecord {
			fmt.Fprintf(stderr, "%v drain %d bytes in %v, lost %d\n", t0.Sub(start), n, time.Since(t0), rec.Stats().Lost)
		}
		if n > 1<<20 {
			idle = 0
		} else if idle = max(2*idle, time.Millisecond); idle > 10*time.Millisecond {
			idle = 10 * time.Millisecond
		}
		r.progress.show(rec.Stats())
	}
	return werr
}

// showLive shows the records as the recorder copies them into the file (--live), on
// its own: the copying never waits for the showing (formatting a line costs more than
// copying a record: showing them between copies let the ring fill, 79% of a fast
// program's records lost against 10% without --live), which lags instead, bounded by
// the follower's window. After stop it shows the rest and closes done.
func (r *recordRun) showLive(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for stopping := false; r.follow != nil; {
		r.poll()
		if r.follow == nil || r.follow.More {
			continue // (a budget a poll)
		}
		if stopping {
			return
		}
		select {
		case <-stop:
			stopping = true // one more poll: what the last drain copied
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// poll shows the records written since the last poll (--live); a reader that went away
// (EPIPE) ends the showing, not the recording.
func (r *recordRun) poll() {
	if r.follow == nil {
		return
	}
	if err := r.follow.Poll(r.stdout, r.stderr); errors.Is(err, syscall.EPIPE) {
		r.follow = nil
		fmt.Fprintf(r.stderr, "kprewrite record: --live: its reader is gone (%v); records go on to %s only\n", err, r.opt.out)
	}
}

// recordSummary says, unless -q, what the trace file holds (for --overwrite, where
// the ring's records are), and always that the file is gone (gone: removed or
// replaced while recording) and the recorder's write errors (ferr: its Finish's).
func recordSummary(stderr io.Writer, rec *recorder.Recorder, opt *recordOptions, gone, ferr error) {
	st := rec.Stats()
	if gone != nil {
		fmt.Fprintf(stderr, "kprewrite record: %s: %v: its %d records (%s) are in no file\n", opt.out, gone, st.Records, sizeString(st.Bytes))
	} else if !opt.quiet && opt.overwrite {
		fmt.Fprintf(stderr, "kprewrite record: the most recent records are in %s's ring (up to %s)", opt.out, sizeString(opt.size))
		if st.Records > 0 {
			fmt.Fprintf(stderr, ", %d records copied by snapshots and SIGUSR2", st.Records)
		}
		if st.Overwritten > 0 {
			fmt.Fprintf(stderr, ", %d older ones overwritten", st.Overwritten)
		}
		fmt.Fprintln(stderr)
	} else if !opt.quiet {
		fmt.Fprintf(stderr, "kprewrite record: %d records (%s) written to %s", st.Records, sizeString(st.Bytes), opt.out)
		if st.Grown > 0 {
			fmt.Fprintf(stderr, "; the ring grew by %s (the program outran the recorder)", sizeString(st.Grown))
		}
		if st.Lost > 0 {
			fmt.Fprintf(stderr, ", %d lost (the ring was full: a larger --buffer-max or --buffer-size keeps them)", st.Lost)
		}
		fmt.Fprintln(stderr)
	}
	if err := rec.Err(); err != nil {
		fmt.Fprintf(stderr, "kprewrite record: %s: %v (later records stayed in the ring or were lost, counted)\n", opt.out, err)
	}
	if ferr != nil {
		fmt.Fprintf(stderr, "kprewrite record: %s: %v\n", opt.out, ferr)
	}
}

// recordedExit is record's status: the program's (128+N when a signal N killed
// it), an error status when the program succeeded but records could not be
// written or their file is gone.
func recordedExit(werr error, rec *recorder.Recorder, prog string, gone error) error {
	var ee *exec.ExitError
	switch {
	case werr == nil:
		if rec.Err() != nil || gone != nil {
			return exitStatus(ExitError)
		}
		return nil
	case errors.As(werr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitStatus(128 + int(ws.Signal()))
		}
		return exitStatus(ee.ExitCode())
	default:
		return fmt.Errorf("wait for %s: %w", prog, werr)
	}
}

// recordInputs are the files of the command line argv that the trace file must not
// be: the program, as exec finds it, and the arguments that name an existing regular
// file other than a trace file. A trace file is what record replaces; a program may be
// given its name to follow it (trace --follow) or to find files beside it, and before
// it exists any name may be.
func recordInputs(argv []string) []string {
	prog := argv[0]
	if p, err := exec.LookPath(prog); err == nil {
		prog = p
	}
	in := []string{prog}
	for _, a := range argv[1:] {
		if st, err := os.Stat(a); err == nil && st.Mode().IsRegular() && !isTraceFile(a) {
			in = append(in, a)
		}
	}
	return in
}

// isTraceFile reports whether the file at path starts as a trace file does.
func isTraceFile(path string) bool {
	f, err := infile.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, len(kprt.TraceMagic))
	_, err = io.ReadFull(f, b)
	return err == nil && string(b) == kprt.TraceMagic
}

func sizeString(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// recordProgress shows, on a terminal, what record has written once it has run for a
// while.
type recordProgress struct {
	f     *os.File
	start time.Time
	last  time.Time
	shown bool
}

func newRecordProgress(stderr io.Writer, quiet bool) *recordProgress {
	p := &recordProgress{start: time.Now()}
	if f, ok := stderr.(*os.File); ok && !quiet {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.f = f
		}
	}
	return p
}

func (p *recordProgress) show(st recorder.Stats) {
	if p.f == nil {
		return
	}
	now := time.Now()
	if now.Sub(p.start) < progressAfter || now.Sub(p.last) < 250*time.Millisecond {
		return
	}
	p.last, p.shown = now, true
	fmt.Fprintf(p.f, "\r\033[Kkprewrite record: %d records, %s written, %d lost", st.Records, sizeString(st.Bytes), st.Lost)
}

func (p *recordProgress) clear() {
	if p.shown {
		fmt.Fprint(p.f, "\r\033[K")
	}
}

// lockedWriter serializes writes from the recorder and from the goroutine exec copies
// the program's output with, when the output is not a file.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
