package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kprewrite/kprewrite/internal/atomicfile"
	"github.com/kprewrite/kprewrite/internal/export"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// openExport opens a trace file for an export by command (messages name it); done
// stops the progress display and releases the file.
func openExport(command, path string, bins []string, stderr io.Writer) (in *export.Input, done func(), err error) {
	s, descs, err := tracefile.OpenStream(path, bins)
	if err != nil {
		return nil, nil, err
	}
	stop := showProgress(command, s, stderr)
	return &export.Input{Stream: s, Descs: descs, Errors: stderr, Command: command}, func() { stop(); s.Close() }, nil
}

// writeTo writes what fn writes to path atomically (no file at all when fn fails), or
// to stdout when path is "" or "-".
func writeTo(path string, stdout io.Writer, fn func(io.Writer) error) error {
	if path == "" || path == "-" {
		return fn(stdout)
	}
	return atomicfile.WriteFile(path, writerTo(fn), 0o644)
}

type writerTo func(io.Writer) error

func (f writerTo) WriteTo(w io.Writer) (int64, error) { return 0, f(w) }

// progressAfter is how long an export runs before it shows its progress.
const progressAfter = 1500 * time.Millisecond

// showProgress prints, on a terminal, how far command has read s once it has run for
// a while, and returns the function that stops it and clears the line.
func showProgress(command string, s *tracefile.Stream, stderr io.Writer) func() {
	f, ok := stderr.(*os.File)
	if !ok || s.Count == 0 {
		return func() {}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		shown := false
		for {
			select {
			case <-quit:
				if shown {
					fmt.Fprint(f, "\r\033[K")
				}
				return
			case now := <-tick.C:
				if now.Sub(start) < progressAfter {
					continue
				}
				shown = true
				n := s.Done()
				fmt.Fprintf(f, "\r\033[K%s: %d/%d records (%d%%)", command, n, s.Count, 100*n/int64(s.Count))
			}
		}
	}()
	return func() { close(quit); <-finished }
}
