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

// Open parses the trace file at path, its records in memory (OpenStream reads them
// without holding them), and finds the descriptions of its images.
func Open(path string, bins []string) (*Trace, Descs, error) {
	s, descs, err := OpenStream(path, bins)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	return s.collect(), descs, nil
}

// OpenStream maps the trace file at path for reading its records in time order (Each)
// and finds the descriptions of its images: in the file itself (the runtime copies
// each image's description frame into it), in the rewritten binaries bins, else in the
// file's own path without the .trace suffix (the default trace path of a rewritten
// binary), if that exists. Close releases the mapping.
func OpenStream(path string, bins []string) (*Stream, Descs, error) {
	// mapped, not read: only the pages the header says are used are touched (a 1 GiB
	// file holding 3 records took 1 GB of memory and 10 s when read whole), and the
	// records are read where they are
	data, err := mmapfile.Map(path, MaxTraceFile, "a trace file")
	if err != nil {
		return nil, nil, err
	}
	s, err := newStream(data, true, fileHoles(path))
	if err != nil {
		mmapfile.Unmap(data)
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	s.mapping = data
	descs := Descs{}
	for _, d := range ownDescs(s.Trace) {
		descs.Add(d)
	}
	implicit := len(bins) == 0
	for _, b := range Inputs(path, bins)[1:] {
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
		// the implicit binary may be gone, or have no probes of its own (a program
		// whose probes are all in its libraries' copies), or be no binary at all
		// (X.trace beside a directory X) when the file describes its images itself
		if implicit && (errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrNoProbes) || len(descs) >= len(s.Images)) {
			continue
		}
		s.Close()
		return nil, nil, err
	}
	addLiveEvents(s.file, s.Header.CtlLast, descs)
	return s, descs, nil
}

// Inputs returns the files OpenStream(path, bins) reads: path, then bins, or, when bins
// is empty, the implicit binary (path without its .trace suffix), whether it exists or
// not.
func Inputs(path string, bins []string) []string {
	in := append([]string{path}, bins...)
	if len(bins) == 0 && strings.HasSuffix(path, Suffix) {
		in = append(in, strings.TrimSuffix(path, Suffix))
	}
	return in
}

// Close releases the file's mapping; records Each gave are no longer readable.
func (s *Stream) Close() error {
	m := s.mapping
	s.mapping, s.data, s.runs = nil, nil, nil
	return mmapfile.Unmap(m)
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
