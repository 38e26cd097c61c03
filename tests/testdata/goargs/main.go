// Package main is the Go program of TestGoArgsMatchGDB: functions that take strings,
// ints, slices, structs by value and by pointer, interfaces, errors and maps, and return
// several results; every call prints what it returned (and every error its message).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

type Point struct{ X, Y int }

type URL struct{ Host, Path string }

type Req struct {
	Method string
	URL    *URL
	N      int
}

type Shape interface{ Area() float64 }

type Sq struct{ S float64 }

func (s Sq) Area() float64 { return s.S * s.S }

type Circle struct{ R float64 }

func (c *Circle) Area() float64 { return 3 * c.R * c.R }

type CodeErr struct{ Code int }

func (e *CodeErr) Error() string { return "code " + strconv.Itoa(e.Code) }

//go:noinline
func greet(s string, n int) int { return len(s) + n }

//go:noinline
func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

//go:noinline
func move(p Point, q *Point) int { return p.X*q.Y - p.Y*q.X }

//go:noinline
func handle(req *Req) int { return len(req.Method) + len(req.URL.Path) + req.N }

//go:noinline
func area(s Shape) float64 { return s.Area() }

//go:noinline
func describe(s Shape, e error) int {
	n := 0
	if s != nil {
		n++
	}
	if e != nil {
		n += 2
	}
	return n
}

//go:noinline
func divmod(a, b int) (q, r int, err error) {
	if b == 0 {
		return 0, 0, &CodeErr{Code: a}
	}
	return a / b, a % b, nil
}

//go:noinline
func label(i int, ok bool) (string, float64, bool) {
	return "n" + strconv.Itoa(i*7), float64(i) / 4, !ok
}

// Mixed has padding between B and F: Go's DWARF describes a Mixed in registers as
// one piece per field with no piece for the padding (gdb, which lays the pieces
// end to end as DWARF says, shows F and U wrong).
type Mixed struct {
	A int8
	B bool
	F float32
	U URL
}

//go:noinline
func mixed(m Mixed) int { return int(m.A) + len(m.U.Host) }

var sink *int

// escape's x moves to the heap (its address outlives the call): DWARF names it &x.
//
//go:noinline
func escape(n int) int {
	x := n * 3
	sink = &x
	x++
	return x + 1
}

//go:noinline
func mid(a, b Point) Point { return Point{(a.X + b.X) / 2, (a.Y + b.Y) / 2} }

// many returns more results than Go's nine integer result registers hold: the tenth
// is returned on the stack.
//
//go:noinline
func many(i int) (a, b, c, d, e, f, g, h, j, k int) {
	return i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7, i + 8, i + 9
}

// size takes a map: traced by its length (nil, then 1 and 3 entries).
//
//go:noinline
func size(m map[string]int) int { return len(m) }

// check takes errors: the kinds whose message is in memory (errors.New, fmt.Errorf
// with and without %w, Errnos, a runtime.plainError, an os.SyscallError, a
// json.SyntaxError), a custom one and nil.
//
//go:noinline
func check(k int, err error) int {
	if err != nil {
		return k + 1
	}
	return k
}

// openFile returns os.Open's error: an *fs.PathError whose Err is a syscall.Errno.
//
//go:noinline
func openFile(name string) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return -1, err
	}
	f.Close()
	return 1, nil
}

// plainErr is the runtime.plainError a close of a nil channel panics with.
func plainErr() (err error) {
	defer func() { err = recover().(error) }()
	var c chan int
	close(c)
	return nil
}

// errorsOf are check's errors in round i.
func errorsOf(i int) []error {
	base := errors.New("file does not exist")
	return []error{nil, base, fmt.Errorf("wrapped %d: %w", i, base), fmt.Errorf("both: %w, %w", base, errors.New("other")),
		fmt.Errorf("plain %d", i), &CodeErr{Code: i}, syscall.Errno(2), syscall.Errno(0), syscall.Errno(4000), plainErr(),
		os.NewSyscallError("read", syscall.Errno(9)), json.Unmarshal([]byte("{"), new(any))}
}

func main() {
	words := []string{"hello, world", "", "kprobes"}
	methods := []string{"GET", "POST", "PUT"}
	for i := 0; i < 3; i++ {
		fmt.Println("greet", greet(words[i], i))
		xs := []int{i, i * 2, i*3 + 1, 40, 50}
		fmt.Println("sum", sum(xs[:2+i]))
		fmt.Println("move", move(Point{i, i + 1}, &Point{7, -8 * i}))
		req := &Req{Method: methods[i], URL: &URL{Host: "h" + strconv.Itoa(i), Path: "/p/" + strconv.Itoa(i)}, N: i * 10}
		fmt.Println("handle", handle(req))
		var s Shape = Sq{float64(i) + 0.5}
		if i == 1 {
			s = &Circle{R: 2}
		}
		fmt.Println("area", area(s))
		var e error
		if i == 2 {
			e = &CodeErr{Code: 9}
			s = nil
		}
		fmt.Println("describe", describe(s, e))
		q, r, err := divmod(17+i, i)
		fmt.Println("divmod", q, r, err)
		str, f, ok := label(i, i%2 == 0)
		fmt.Println("label", str, f, ok)
		m := mid(Point{i, 2 * i}, Point{10, -4})
		fmt.Println("mid", m.X, m.Y)
		_, _, _, _, _, _, _, _, _, k := many(i)
		fmt.Println("many", k)
		fmt.Println("escape", escape(i))
		mx := Mixed{A: int8(-i), B: i == 1, F: float32(i) + 0.25, U: URL{Host: methods[i], Path: "/m"}}
		fmt.Println("mixed", mixed(mx), mx.A, map[bool]int{true: 1}[mx.B], mx.F, mx.U.Host, mx.U.Path)
		var ms map[string]int
		for k := 0; k < 2*i-1; k++ {
			if ms == nil {
				ms = map[string]int{}
			}
			ms[strconv.Itoa(k)] = k
		}
		fmt.Println("size", size(ms))
		for k, e := range errorsOf(i) {
			fmt.Println("check", k, check(k, e), e)
		}
		name := "/nonexistent/kprewrite-" + strconv.Itoa(i)
		if i == 1 {
			name = "/"
		}
		n, err := openFile(name)
		fmt.Println("open", n, err)
	}
}
