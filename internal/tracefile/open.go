package tracefile

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/mmapfile"
)

// MaxTraceFile bounds the trace files Open reads: the runtime makes record areas of
// at most 64 GiB.
const MaxTraceFile = 128 << 30

// Suffix is appended to a rewritten binary's path to make its default trace file path.
const Suffix = ".trace"

// Open parses the trace file at path and finds the descriptions of its images: in the
// file itself (the runtime copies each image's description frame into it), in the
// rewritten binaries bins, else in the file's own path without the .trace suffix (the
// default trace path of a rewritten binary), if that exists.
func Open(path string, bins []string) (*Trace, Descs, error) {
	// mapped, not read: only the pages the header says are used are touched (a 1 GiB
	// file holding 3 records took 1 GB of memory and 10 s when read whole)
	data, err := mmapfile.Map(path, MaxTraceFile, "a trace file")
	if err != nil {
		return nil, nil, err
	}
	tr, err := ParseTrace(data)
	mmapfile.Unmap(data) // the Trace holds copies
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	descs := Descs{}
	for _, d := range ownDescs(tr) {
		descs.Add(d)
	}
	implicit := len(bins) == 0
	if implicit && strings.HasSuffix(path, Suffix) {
		bins = append(bins, strings.TrimSuffix(path, Suffix))
	}
	for _, b := range bins {
		f, err := elfio.Open(b)
		if err == nil {
			var im *Image
			im, err = ReadImage(f)
			f.Close()
			if err == nil {
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

// ownDescs returns the image descriptions the trace file itself holds. Images without
// one (older runtimes) need their binaries; a frame that does not parse, or describes
// another image, is left out the same way.
func ownDescs(tr *Trace) []*Desc {
	var out []*Desc
	for _, im := range tr.Images {
		frame, ok := FindDesc(im.Desc)
		if !ok {
			continue
		}
		if d, err := ParseDesc(frame); err == nil && d.ImageID == im.ImageID {
			out = append(out, d)
		}
	}
	return out
}
