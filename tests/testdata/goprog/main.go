// Command goprog is the Go program of TestGoCalls: goroutines, recursion that grows
// their stacks (fib, and deep with a 4 KiB frame), a string argument, and an HTTP
// server on 127.0.0.1 with 8 client goroutines making 400 requests. It counts its own
// calls and prints the counts. Its goroutines move between threads freely: records
// carry the goroutine, and calls nest per goroutine. It ends when every other
// goroutine has, so that every traced call has returned.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var nfib, ndeep, nleaf, ngreet, nhandle atomic.Int64

//go:noinline
func fib(n int) int {
	nfib.Add(1)
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

// deep's frame is big enough that a few calls fill a new goroutine's stack: the stack
// is copied (runtime.morestack) many times on the way down
//
//go:noinline
func deep(n int) int {
	ndeep.Add(1)
	var buf [512]int
	buf[n%512] = leaf(n)
	if n == 0 {
		return buf[0]
	}
	return deep(n-1) + buf[n%512] - n
}

//go:noinline
func leaf(n int) int {
	nleaf.Add(1)
	return n + 1
}

//go:noinline
func greet(s string, n int) int {
	ngreet.Add(1)
	return len(s) + n
}

func handle(w http.ResponseWriter, r *http.Request) {
	nhandle.Add(1)
	io.WriteString(w, strings.TrimPrefix(r.URL.Path, "/"))
}

func main() {
	var wg sync.WaitGroup
	var sum atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			sum.Add(int64(fib(18 + g)))
			sum.Add(int64(deep(1000 * (g + 1))))
			sum.Add(int64(greet("hello, goroutine", g)))
		}(g)
	}
	wg.Wait()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: http.HandlerFunc(handle)}
	served := make(chan error)
	go func() {
		served <- srv.Serve(ln)
	}()
	url := "http://" + ln.Addr().String() + "/"
	var bad atomic.Int64
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				want := fmt.Sprintf("c%di%d", c, i)
				resp, err := http.Get(url + want)
				if err != nil {
					bad.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != want {
					bad.Add(1)
				}
			}
		}(c)
	}
	wg.Wait()
	srv.Close()
	<-served
	http.DefaultClient.CloseIdleConnections()
	// every other goroutine has returned from its function (and so written its
	// return record) before the program ends
	for i := 0; runtime.NumGoroutine() > 1; i++ {
		if i == 10000 {
			fmt.Printf("%d goroutines left\n", runtime.NumGoroutine()-1)
			break
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("sum %d bad %d\n", sum.Load(), bad.Load())
	for _, c := range []struct {
		name string
		n    *atomic.Int64
	}{{"main.fib", &nfib}, {"main.deep", &ndeep}, {"main.leaf", &nleaf}, {"main.greet", &ngreet}, {"main.handle", &nhandle}} {
		fmt.Printf("calls %s %d\n", c.name, c.n.Load())
	}
}
