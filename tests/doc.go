// Package tests holds kprewrite's end-to-end tests, on programs compiled at test time
// and on real programs of the machine.
//
// Programs are built with tests/internal/testprog, rewritten through the command line
// in-process, and run; their traces, exit statuses and outputs are compared with the
// original's and with the kernel's uprobe tracer.
//
// It has no code of its own outside the _test.go files; `go test ./tests` runs it.
//
// It has no code of its own outside the _test.go files; `go test ./tests` runs it.
package tests
