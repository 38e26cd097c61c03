package export

import (
	"bufio"
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// Input is a trace file opened for an export, with the descriptions of its images.
type Input struct {
	Stream *tracefile.Stream
	Descs  tracefile.Descs
	// Errors receives, once per reason, why records were left out (their image has no
	// description, or they do not decode); nil discards them.
	Errors io.Writer
	// Command prefixes those messages ("kprewrite trace").
	Command string

	fm       *tracefile.Formatter
	reported map[string]bool
}

func (in *Input) formatter() *tracefile.Formatter {
	if in.fm == nil {
		in.fm = tracefile.NewFormatter(in.Descs)
		in.reported = map[string]bool{}
	}
	return in.fm
}

// report notes err once.
func (in *Input) report(err error) {
	msg := err.Error()
	if in.reported[msg] || in.Errors == nil {
		return
	}
	in.reported[msg] = true
	fmt.Fprintf(in.Errors, "%s: %s\n", in.Command, msg)
}

// output buffers an export's writes; the first write error ends the export.
type output struct {
	w   *bufio.Writer
	buf []byte
}

func newOutput(w io.Writer) *output { return &output{w: bufio.NewWriterSize(w, 256<<10)} }

// flush writes buf out.
func (o *output) flush() error {
	_, err := o.w.Write(o.buf)
	o.buf = o.buf[:0]
	return err
}

// writeIfFull writes buf out once it holds enough to be worth a write.
func (o *output) writeIfFull() error {
	if len(o.buf) < 64<<10 {
		return nil
	}
	return o.flush()
}

func (o *output) close() error {
	if err := o.flush(); err != nil {
		return err
	}
	return o.w.Flush()
}
