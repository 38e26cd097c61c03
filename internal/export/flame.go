package export

import (
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"sort"
	"strconv"
	"strings"
)

// folded returns each stack as flamegraph.pl's folded line key ("outer;inner"), with
// the self time of the calls that had it; stacks that differ only in which image
// holds a function of the same name are summed, as the names are all a flame graph
// shows.
func (s *Stacks) folded() (keys []string, self map[string]uint64) {
	self = map[string]uint64{}
	names := make([]string, len(s.Nodes))
	for n := 1; n < len(s.Nodes); n++ { // parents come before their children
		node := &s.Nodes[n]
		name := strings.ReplaceAll(s.Funcs[node.Func].Name, ";", ":")
		if node.Parent > 0 {
			name = names[node.Parent] + ";" + name
		}
		names[n] = name
		if node.Calls == 0 {
			continue
		}
		if _, ok := self[name]; !ok {
			keys = append(keys, name)
		}
		self[name] += node.Self
	}
	sort.Strings(keys)
	return keys, self
}

// WriteFolded writes the stacks as folded lines, "outer;inner;leaf NS": the self time
// in nanoseconds of the calls with that stack, which flamegraph.pl, inferno and
// speedscope read.
func WriteFolded(w io.Writer, s *Stacks) error {
	o := newOutput(w)
	keys, self := s.folded()
	for _, k := range keys {
		if self[k] == 0 {
			continue
		}
		o.buf = append(o.buf, k...)
		o.buf = append(o.buf, ' ')
		o.buf = strconv.AppendUint(o.buf, self[k], 10)
		o.buf = append(o.buf, '\n')
		if err := o.writeIfFull(); err != nil {
			return err
		}
	}
	return o.close()
}

// flameNode is a frame of the flame graph: stacks merged by function name.
type flameNode struct {
	name  string
	total uint64 // time of the calls in it and under it
	calls uint64
	kids  map[string]*flameNode
}

func (f *flameNode) kid(name string) *flameNode {
	k := f.kids[name]
	if k == nil {
		k = &flameNode{name: name, kids: map[string]*flameNode{}}
		f.kids[name] = k
	}
	return k
}

// SVG flame graph geometry.
const (
	svgWidth    = 1200
	svgFrame    = 16 // height of a frame
	svgPad      = 10
	svgTitle    = 40 // room for the title above the frames
	svgCharW    = 7  // about the width of a character of the 12px font
	svgMinWidth = 0.1
)

// WriteFlameSVG writes a flame graph as a standalone SVG: the outermost calls at the
// bottom, each frame as wide as its function's time under its parent's stack (self
// plus callees), siblings in name order as flamegraph.pl draws them; hovering a frame
// shows its name, calls, time and share.
func WriteFlameSVG(w io.Writer, s *Stacks, title string) error {
	root := &flameNode{name: "all", kids: map[string]*flameNode{}}
	nodes := make([]*flameNode, len(s.Nodes))
	nodes[0] = root
	depth := make([]int, len(s.Nodes))
	maxDepth := 0
	for n := 1; n < len(s.Nodes); n++ {
		node := &s.Nodes[n]
		f := nodes[node.Parent].kid(s.Funcs[node.Func].Name)
		nodes[n] = f
		depth[n] = depth[node.Parent] + 1
		maxDepth = max(maxDepth, depth[n])
		f.calls += node.Calls
	}
	// a frame's total is the self time of every stack at or under it, so a function
	// that recurses is not counted twice
	for n := len(s.Nodes) - 1; n >= 1; n-- {
		self := s.Nodes[n].Self
		for f, m := nodes[n], int32(n); ; {
			f.total += self
			if m == 0 {
				break
			}
			m = s.Nodes[m].Parent
			f = nodes[m]
		}
	}
	height := svgTitle + (maxDepth+1)*svgFrame + 2*svgPad
	o := newOutput(w)
	fmt.Fprintf(o.w, `<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" xmlns="http://www.w3.org/2000/svg">
<style>text { font-family: Verdana, sans-serif; font-size: 12px; fill: #000; } .f:hover rect { stroke: #000; stroke-width: 0.5; }</style>
<rect x="0" y="0" width="100%%" height="100%%" fill="#f8f8f8"/>
<text x="%d" y="24" text-anchor="middle" style="font-size:17px">%s</text>
`, svgWidth, height, svgWidth, height, svgWidth/2, html.EscapeString(title))
	scale := float64(svgWidth-2*svgPad) / float64(max(root.total, 1))
	var draw func(f *flameNode, x float64, d int) error
	draw = func(f *flameNode, x float64, d int) error {
		wd := float64(f.total) * scale
		if wd < svgMinWidth {
			return nil
		}
		y := height - svgPad - (d+1)*svgFrame
		share := 100 * float64(f.total) / float64(max(root.total, 1))
		tip := fmt.Sprintf("%s (%s, %.2f%%)", f.name, formatNs(f.total), share)
		if f != root {
			tip = fmt.Sprintf("%s (%d calls, %s, %.2f%%)", f.name, f.calls, formatNs(f.total), share)
		}
		fmt.Fprintf(o.w, `<g class="f"><title>%s</title><rect x="%.1f" y="%d" width="%.1f" height="%d" rx="2" fill="%s"/>`,
			html.EscapeString(tip), x, y, wd, svgFrame-1, flameColor(f.name))
		if label := fitLabel(f.name, wd); label != "" {
			fmt.Fprintf(o.w, `<text x="%.1f" y="%d">%s</text>`, x+3, y+12, html.EscapeString(label))
		}
		io.WriteString(o.w, "</g>\n")
		names := make([]string, 0, len(f.kids))
		for k := range f.kids {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			kid := f.kids[k]
			if err := draw(kid, x, d+1); err != nil {
				return err
			}
			x += float64(kid.total) * scale
		}
		return nil
	}
	if err := draw(root, svgPad, 0); err != nil {
		return err
	}
	io.WriteString(o.w, "</svg>\n")
	return o.close()
}

// fitLabel is name cut to fit a frame wd pixels wide ("" when not even two
// characters fit).
func fitLabel(name string, wd float64) string {
	n := int((wd - 6) / svgCharW)
	if n < 3 {
		return ""
	}
	if len(name) <= n {
		return name
	}
	return name[:n-2] + ".."
}

// flameColor is a warm colour that depends on the name only (the same function has
// the same colour in every graph).
func flameColor(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	return fmt.Sprintf("rgb(%d,%d,%d)", 205+v%50, 80+(v>>8)%150, 40+(v>>16)%50)
}

// formatNs prints a duration with the unit uftrace uses for it.
func formatNs(ns uint64) string {
	switch {
	case ns < 1000:
		return fmt.Sprintf("%d ns", ns)
	case ns < 1000_000:
		return fmt.Sprintf("%.3f us", float64(ns)/1e3)
	case ns < 1000_000_000:
		return fmt.Sprintf("%.3f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.3f  s", float64(ns)/1e9)
}
