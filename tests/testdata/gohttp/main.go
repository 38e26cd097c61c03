// Package main is the HTTP program of TestGoArgsHTTP: a server on 127.0.0.1 and its
// own client, which asks for /p/0, /p/1 and /p/2 and prints each answer.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
)

func handle(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hi %s %s", r.Method, r.URL.Path) }

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go http.Serve(ln, http.HandlerFunc(handle))
	for i := 0; i < 3; i++ {
		resp, err := http.Get(fmt.Sprintf("http://%s/p/%d", ln.Addr(), i))
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(string(b))
	}
}
