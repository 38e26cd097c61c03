package cli

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/infile"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

func runFormat(args []string, stdout, _ io.Writer) error {
	fs := helpFlagSet("format", "format [--event GROUP/EVENT] BINARY|FILE", stdout)
	only := fs.String("event", "", "print only this event's format (GROUP/EVENT)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one rewritten BINARY or trace FILE, got %d arguments (see kprewrite format -h)", len(pos))
	}
	descs, err := readDescs(pos[0])
	if err != nil {
		return err
	}
	n := 0
	for _, d := range descs {
		for _, e := range d.Events {
			if *only != "" && e.Group+"/"+e.Name != *only {
				continue
			}
			p, err := eventdef.Parse(e.Def)
			if err != nil {
				return fmt.Errorf("%s: event %s/%s: %w", pos[0], e.Group, e.Name, err)
			}
			// the definition as given may have left the name to be generated, or
			// named another event of a multi-probe event
			p.Group, p.Event = e.Group, e.Name
			if n > 0 {
				fmt.Fprintln(stdout)
			}
			fmt.Fprint(stdout, withGoID(eventdef.FormatFile(p, e.ID), e))
			n++
		}
		for _, sy := range d.Synthetic {
			if sy.ID == 0 || (*only != "" && "synthetic/"+sy.Name != *only) {
				continue // (an older rewrite's synthetic events write no records)
			}
			def, err := evhist.ParseSynthetic(sy.Def)
			if err != nil {
				return fmt.Errorf("%s: synthetic event %s: %w", pos[0], sy.Name, err)
			}
			def.ID = sy.ID
			if n > 0 {
				fmt.Fprintln(stdout)
			}
			fmt.Fprint(stdout, def.FormatFile())
			n++
		}
	}
	if *only != "" && n == 0 {
		return fmt.Errorf("%s: no event %s", pos[0], *only)
	}
	return nil
}

// withGoID adds to the format file ff of event e, when its records carry a goroutine
// id (a Go function's event: DescEvent.GoID), the id's field after the event's own:
// at its offset in the kernel's layout (the entry header's 16 bytes, 24 for a return
// event, then the data), left out of print fmt as the trace lines leave it out.
func withGoID(ff string, e tracefile.DescEvent) string {
	i := strings.LastIndex(ff, "\n\nprint fmt:")
	if e.GoID <= 0 || i < 0 {
		return ff
	}
	off := 16 + e.GoID - 1
	if e.Return {
		off += 8
	}
	var b strings.Builder
	eventdef.FormatField(&b, "u64", "common_goid", off, 8, false)
	return ff[:i+1] + b.String() + ff[i+1:]
}

// readDescs reads the image descriptions of a rewritten binary, or of every image a
// trace file holds (ordered by image id).
func readDescs(path string) ([]*tracefile.Desc, error) {
	head := make([]byte, 4)
	f, err := infile.Open(path) // not a FIFO: its open and read would wait for a writer
	if err != nil {
		return nil, err
	}
	_, _ = io.ReadFull(f, head)
	f.Close()
	if bytes.Equal(head, []byte("\x7fELF")) {
		f, err := elfio.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		im, err := tracefile.ReadImage(f)
		if err != nil {
			return nil, err
		}
		return []*tracefile.Desc{im.Desc}, nil
	}
	_, descs, err := tracefile.Open(path, nil)
	if err != nil {
		return nil, err
	}
	ids := make([]uint64, 0, len(descs))
	for id := range descs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]*tracefile.Desc, len(ids))
	for i, id := range ids {
		out[i] = descs[id]
	}
	return out, nil
}
