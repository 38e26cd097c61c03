// Package testprog helps end-to-end tests: it builds small C and C++ programs with
// gcc/g++ at test time, runs programs with a timeout, and compares how two runs behaved
// (stdout, stderr, exit status or signal), so a rewritten binary can be checked against
// its original.
package testprog
