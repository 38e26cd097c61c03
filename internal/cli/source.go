package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kprewrite/kprewrite/internal/infile"
	"github.com/kprewrite/kprewrite/internal/srcprobe"
)

// sourceListing prints check --lines FUNC or check --vars POINT.
func sourceListing(w io.Writer, binary, debugFile, lines, vars string, globals, asJSON bool) error {
	r := &srcprobe.Resolver{Binary: binary, DebugFile: debugFile}
	if lines != "" {
		fls, err := r.Lines(lines)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(w, fls)
		}
		for _, fl := range fls {
			printFuncLines(w, fl)
		}
		return nil
	}
	pvs, err := r.Vars(vars, globals)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, pvs)
	}
	for _, pv := range pvs {
		fmt.Fprintf(w, "Available variables at %s\n        @<%s> %#x\n", vars, pv.Where, pv.Addr)
		for _, v := range pv.Vars {
			kind := "local"
			switch {
			case v.Param:
				kind = "param"
			case v.Global:
				kind = "global"
			}
			if v.Fetch != "" {
				fmt.Fprintf(w, "                %-6s %-24s %-12s %s\n", kind, v.Type, v.Name, v.Fetch)
			} else {
				fmt.Fprintf(w, "                %-6s %-24s %-12s (%s)\n", kind, v.Type, v.Name, v.Reason)
			}
		}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printFuncLines prints a function's lines as perf probe -L does: the relative
// number of each line a probe can go on, then the source text when the file is
// readable here.
func printFuncLines(w io.Writer, fl srcprobe.FuncLines) {
	head := fmt.Sprintf("<%s@%s:%d>", fl.Func, fl.File, fl.Line)
	if fl.Inlined {
		head += fmt.Sprintf(" inlined at %s, entry %#x", fl.Call, fl.Entry)
	} else {
		head += fmt.Sprintf(" entry %#x", fl.Entry)
	}
	fmt.Fprintln(w, head)
	if len(fl.Lines) == 0 {
		return
	}
	src := readLines(fl.File)
	last := fl.Lines[len(fl.Lines)-1].Line
	probe := map[int]srcprobe.ProbeLine{}
	for _, pl := range fl.Lines {
		probe[pl.Line] = pl
	}
	for n := fl.Line; n <= last; n++ {
		text := ""
		if n-1 < len(src) {
			text = strings.ReplaceAll(src[n-1], "\t", "        ")
		}
		if pl, ok := probe[n]; ok {
			addrs := make([]string, len(pl.Addrs))
			for i, a := range pl.Addrs {
				addrs[i] = fmt.Sprintf("%#x", a)
			}
			fmt.Fprintf(w, "  %5d  %-60s  # %s\n", pl.Rel, text, strings.Join(addrs, " "))
		} else if src != nil {
			fmt.Fprintf(w, "         %s\n", text)
		}
	}
}

// readLines reads a source file's lines, or nil.
func readLines(path string) []string {
	f, err := infile.Open(path) // (a FIFO named by the debug information would block)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
