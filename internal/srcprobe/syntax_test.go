package srcprobe

import "testing"

func TestParseSite(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want site
	}{
		{"handle:2", site{fn: "handle", line: 2, rel: true}},
		{"prog.c:42", site{file: "prog.c", line: 42}},
		{"src/x/prog.cc:7", site{file: "src/x/prog.cc", line: 7}},
		{"handle@prog.c", site{fn: "handle", file: "prog.c"}},
		{"handle@src/prog.c:3", site{fn: "handle", file: "src/prog.c", line: 3, rel: true}},
		{"handle", site{raw: true}},
		{"handle+4", site{raw: true}},
		{"0x1139", site{raw: true}},
		{"libc.so.6:malloc", site{raw: true}},
		{"libz.so.1:1234", site{raw: true}},
		{"/usr/lib/x/libz.so:0x10", site{raw: true}},
		{"/bin/prog:4096", site{raw: true}},
		// Go: qualified function names, .go files
		{"main.sum:3", site{fn: "main.sum", line: 3, rel: true}},
		{"main.(*Server).Serve:2", site{fn: "main.(*Server).Serve", line: 2, rel: true}},
		{"main.go:42", site{file: "main.go", line: 42}},
		{"main.sum", site{raw: true}},
		{"main.(*S:2", site{raw: true}},
	} {
		got := parseSite(tc.in)
		tc.want.text = tc.in
		if got != tc.want {
			t.Errorf("parseSite(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseArg(t *testing.T) {
	for _, tc := range []struct {
		in          string
		name, typ   string
		chain       string // argName of the chain, "" if none
		keyword     string
		sourceLevel bool
	}{
		{"n", "", "", "n", "", true},
		{"r->len", "", "", "len", "", true},
		{"l=r->next->len:x32", "l", "x32", "len", "", true},
		{"q.at.x", "", "", "x", "", true},
		{"a[2]", "", "", "a_2", "", true},
		{"p->hist[3]", "", "", "hist_3", "", true},
		{"$params", "", "", "", "$params", true},
		{"$arg*", "", "", "", "$params", true},
		{"$vars", "", "", "", "$vars", true},
		{"$retval", "", "", "", "$retval", false},
		{"x=%di:u32", "x", "u32", "", "", false},
		{"+8(%sp):string", "", "string", "", "", false},
		{"@counter", "", "", "", "", false},
		{"var.1=@11", "var.1", "", "", "", false},
		{"a-b=n:u8", "a-b", "u8", "", "", false},
	} {
		a := parseArg(tc.in, 1)
		if a.name != tc.name || a.typ != tc.typ || a.keyword != tc.keyword || a.sourceLevel() != tc.sourceLevel {
			t.Errorf("parseArg(%q) = %+v", tc.in, a)
		}
		if got := ""; a.isChain {
			if got = a.chain.argName(); got != tc.chain {
				t.Errorf("parseArg(%q): chain name %q, want %q", tc.in, got, tc.chain)
			}
		} else if tc.chain != "" {
			t.Errorf("parseArg(%q): not a chain", tc.in)
		}
	}
	for _, bad := range []string{"r->", "r.", "a[", "a[x]", "r-len"} {
		if a := parseArg(bad, 1); a.isChain || !a.bad() {
			t.Errorf("parseArg(%q) = %+v, want a bad chain", bad, a)
		}
	}
}

func TestIsSourceLevel(t *testing.T) {
	for def, want := range map[string]bool{
		"p:g/e handle %di":                 false,
		"r:g/e handle $retval":             false,
		"p:g/e handle n":                   true,
		"p handle:3":                       true,
		"p:e prog.c:10 %ax":                true,
		"r:e handle@prog.c $retval":        true,
		"-:g/e":                            false,
		"p:g/e libc.so.6:malloc %di":       false,
		"p:g/e handle x=+0(%di):u32 $vars": true,
		// a NAME= that is no C identifier is the kernel form's BAD_ARG_NAME (eventdef)
		"p work var.1=@11":      false,
		"p work a-b=%di":        false,
		"p work var.1=n":        false,
		"p work n:u32{A=1,B=2}": true,
	} {
		if got := IsSourceLevel(def); got != want {
			t.Errorf("IsSourceLevel(%q) = %v, want %v", def, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"p:g/e handle:2 n r->len", "p a.c:3 x=q.a[2]:u8", "r f@a.c $retval", "p f $vars $params"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, def string) {
		IsSourceLevel(def)
		parseSite(def)
		a := parseArg(def, 1)
		if a.isChain {
			a.chain.argName()
		}
	})
}
