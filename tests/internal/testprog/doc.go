// Package testprog helps end-to-end tests: it builds small C and C++ programs at test
// time, runs programs with a timeout, and compares how two runs behaved.
//
// Programs are built with gcc/g++; a comparison looks at stdout, stderr, exit status
// or signal, so a rewritten binary can be checked against its original.
package testprog
