package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

func runTrace(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("trace", "trace [-b BINARY]... [--no-header] FILE", stdout)
	var bins multiFlag
	fs.Var(&bins, "b", "a rewritten binary whose events the trace holds (repeatable; default: FILE without "+TraceSuffix+")")
	noHeader := fs.Bool("no-header", false, "print only the event lines")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one trace FILE, got %d arguments (see kprewrite trace -h)", len(pos))
	}
	tr, descs, err := openTrace(pos[0], bins, stderr)
	if err != nil {
		return err
	}
	return tracefile.WriteTrace(stdout, stderr, tr, descs, !*noHeader)
}

// openTrace parses a trace file and finds the descriptions of its images: in the
// binaries given with -b, else in the file's own path without the .trace suffix (the
// default trace path of a rewritten binary).
func openTrace(path string, bins []string, stderr io.Writer) (*tracefile.Trace, tracefile.Descs, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read trace: %w", err)
	}
	tr, err := tracefile.ParseTrace(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	descs := tracefile.Descs{}
	for _, d := range runtimeDescs(tr) {
		descs.Add(d)
	}
	implicit := len(bins) == 0
	if implicit && strings.HasSuffix(path, TraceSuffix) {
		bins = append(bins, strings.TrimSuffix(path, TraceSuffix))
	}
	for _, b := range bins {
		f, err := elfio.Open(b)
		if err == nil {
			var im *tracefile.Image
			if im, err = tracefile.ReadImage(f); err == nil {
				descs.Add(im.Desc)
				continue
			}
		}
		if implicit && errors.Is(err, os.ErrNotExist) {
			continue
		}
		return nil, nil, err
	}
	return tr, descs, nil
}

// runtimeDescs returns the image descriptions the trace file itself holds: the runtime
// copies each image's description frame into the file when the image registers there.
// Images without one (older runtimes) need their binaries (-b); a frame that does not
// parse, or describes another image, is left out the same way.
func runtimeDescs(tr *tracefile.Trace) []*tracefile.Desc {
	var out []*tracefile.Desc
	for _, im := range tr.Images {
		frame, ok := tracefile.FindDesc(im.Desc)
		if !ok {
			continue
		}
		if d, err := tracefile.ParseDesc(frame); err == nil && d.ImageID == im.ImageID {
			out = append(out, d)
		}
	}
	return out
}
