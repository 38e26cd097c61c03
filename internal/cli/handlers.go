package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite/internal/handlers"
)

// compileHandlers compiles the --handlers files and turns the probes they declare into
// definitions resolved like -e ones ("p:handlers/NAME SITE", origin "FILE:LINE (NAME)").
// gcc's warnings and stack-use warnings go to stderr.
func compileHandlers(files []string, defs []probeDef, stderr io.Writer) (*handlers.Set, []probeDef, error) {
	if len(files) == 0 {
		return nil, nil, nil
	}
	set, err := handlers.Compile(context.Background(), files, handlers.Options{})
	if err != nil {
		return nil, nil, err
	}
	for _, w := range set.Warnings {
		fmt.Fprintf(stderr, "kprewrite rewrite: warning: %s\n", w)
	}
	seen := map[string]string{}
	for _, d := range defs {
		seen[d.Probe.Group+"/"+d.Probe.Event] = d.Origin
	}
	var out []probeDef
	for i := range set.Probes {
		p := &set.Probes[i]
		ev, err := p.Event()
		if err != nil {
			return nil, nil, err
		}
		key := ev.Group + "/" + ev.Event
		if prev, dup := seen[key]; dup {
			return nil, nil, fmt.Errorf("%s: event %s is already defined by %s", p.Origin(), key, prev)
		}
		seen[key] = p.Origin()
		out = append(out, probeDef{Probe: ev, Origin: p.Origin(), Handler: p})
	}
	return set, out, nil
}
