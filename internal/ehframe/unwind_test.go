package ehframe

import (
	"bufio"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// readelfRow is one row of `readelf --debug-dump=frames-interp`: the CFA and the rbp
// and return-address columns as it prints them ("rsp+8", "c-16", "u", "exp", ...).
type readelfRow struct {
	pc          uint64
	cfa, bp, ra string
}

// readelfInterp runs readelf -wF on path and returns the rows of every FDE of .eh_frame.
func readelfInterp(t *testing.T, path string) []readelfRow {
	t.Helper()
	cmd := exec.Command("readelf", "--debug-dump=frames-interp,no-follow-links", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("readelf: %v", err)
	}
	var rows []readelfRow
	var cols []string
	inEh, inFDE := false, false
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Contents of the "):
			inEh = strings.HasPrefix(line, "Contents of the .eh_frame section")
			inFDE = false
		case !inEh:
		case line == "":
		case inFDE && cols != nil && len(line) > 16 && line[16] == ' ' && line[0] != ' ':
			fs := strings.Fields(line)
			if len(fs) != len(cols) {
				t.Fatalf("readelf: row %q for columns %q", line, cols)
			}
			pc, err := strconv.ParseUint(fs[0], 16, 64)
			if err != nil {
				t.Fatalf("readelf: row %q: %v", line, err)
			}
			r := readelfRow{pc: pc, cfa: fs[1], bp: "u", ra: "u"}
			for k, c := range cols {
				switch c {
				case "rbp":
					r.bp = fs[k]
				case "ra":
					r.ra = fs[k]
				}
			}
			rows = append(rows, r)
		case line[0] != ' ' && strings.Contains(line, " FDE "):
			inFDE, cols = true, nil
		case line[0] != ' ':
			inFDE = false // a CIE's rows
		case strings.HasPrefix(line, "   LOC"):
			cols = strings.Fields(line)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("readelf: %v", err)
	}
	return rows
}

// TestUnwindRowsMatchReadelf: at every location where readelf's interpretation of the
// call frame instructions says a rule changes, UnwindRows gives the same CFA, rbp and
// return-address rules (or Undefined where a stack walk cannot follow them).
func TestUnwindRowsMatchReadelf(t *testing.T) {
	bins := []string{buildCached(t, "c-O2", "c", cSource, "gcc", "-O2"), buildCached(t, "c-O0", "c", cSource, "gcc", "-O0"), buildCached(t, "cxx-O2", "cc", cxxSource, "g++", "-O2")}
	for _, p := range []string{"/usr/bin/zstd", "/usr/bin/git"} {
		if _, err := os.Stat(p); err == nil {
			bins = append(bins, p)
		}
	}
	for _, bin := range bins {
		im := loadImage(t, bin)
		fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		rows, err := UnwindRows(im.eh, im.ehAddr, im.text, im.data, fdes)
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		if !sort.SliceIsSorted(rows, func(a, b int) bool { return rows[a].PC < rows[b].PC }) {
			t.Fatalf("%s: rows not sorted", bin)
		}
		want := readelfInterp(t, bin)
		if len(want) < 20 {
			t.Fatalf("%s: readelf gave %d rows", bin, len(want))
		}
		defined, bad := 0, 0
		for _, w := range want {
			k := sort.Search(len(rows), func(i int) bool { return rows[i].PC > w.pc }) - 1
			if k < 0 {
				t.Fatalf("%s: no row at %#x", bin, w.pc)
			}
			if got, ok := describe(rows[k]); !ok || got != expect(w) {
				if bad++; bad <= 10 {
					t.Errorf("%s: at %#x readelf says CFA %s rbp %s ra %s, UnwindRows %s", bin, w.pc, w.cfa, w.bp, w.ra, got)
				}
			} else if !rows[k].Undefined {
				defined++
			}
		}
		if defined < len(want)*9/10 {
			t.Errorf("%s: only %d of %d readelf rows have a defined rule", bin, defined, len(want))
		}
		t.Logf("%s: %d FDEs, %d rows, %d readelf rows compared", bin, len(fdes), len(rows), len(want))
	}
}

// describe prints a row in readelf's terms.
func describe(r UnwindRow) (string, bool) {
	if r.Undefined {
		return "undefined", true
	}
	reg := "rsp"
	if r.CFABP {
		reg = "rbp"
	}
	bp := "u"
	switch r.BP {
	case BPSaved:
		bp = "c" + strconv.FormatInt(r.BPOffset, 10)
	case BPLost:
		bp = "lost"
	}
	return reg + "+" + strconv.FormatInt(r.CFAOffset, 10) + " " + bp, true
}

// expect is what describe should say for a readelf row.
func expect(w readelfRow) string {
	if w.ra != "c-8" || (!strings.HasPrefix(w.cfa, "rsp+") && !strings.HasPrefix(w.cfa, "rbp+")) {
		return "undefined"
	}
	bp := w.bp
	if bp != "u" && !strings.HasPrefix(bp, "c-") && !strings.HasPrefix(bp, "c+") {
		bp = "lost"
	}
	if strings.HasPrefix(bp, "c+") {
		bp = "c" + bp[2:]
	}
	return w.cfa + " " + bp
}
