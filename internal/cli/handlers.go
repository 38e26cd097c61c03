package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite/internal/handlers"
	"github.com/kprewrite/kprewrite/internal/rewriter"
)

// compileHandlers compiles the --handlers files and appends the probes they declare to
// defs (rewriter.HandlerDefs). gcc's warnings and stack-use warnings go to stderr.
func compileHandlers(files []string, defs []rewriter.Probe, stderr io.Writer) (*handlers.Set, []rewriter.Probe, error) {
	if len(files) == 0 {
		return nil, defs, nil
	}
	set, err := handlers.Compile(context.Background(), files, handlers.Options{})
	if err != nil {
		return nil, nil, err
	}
	for _, w := range set.Warnings {
		fmt.Fprintf(stderr, "kprewrite rewrite: warning: %s\n", w)
	}
	defs, err = rewriter.HandlerDefs(defs, set)
	return set, defs, err
}
