// Package cli implements the kprewrite command line: argument parsing, the subcommands
// and their text and JSON output. cmd/kprewrite only calls Main, so tests run the same
// code in-process.
package cli
