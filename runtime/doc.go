// Package kprt (folder runtime/) is kprewrite's run-time support as Go sees it: the
// runtime's committed object, the Go mirror of its ABI, and the probe tables'
// encoder.
//
// The object is the freestanding C and assembler of src/ and include/ built into one
// (Object, kprewrite_rt.o, made by `go generate ./runtime` and checked byte for byte
// in CI); the ABI mirror is abi.go (include/kprewrite_abi.h's structures, constants
// and symbols; abi_test.go compares them with the header); the encoder writes the
// probe tables the runtime reads at start-up (Tables.Encode).
//
// Importers name it kprt, not runtime, so the standard library's stays visible. What
// the runtime does at each probe hit, and what that costs, is in docs/runtime.md;
// what to watch: every change to src/ or include/ needs `go generate ./runtime` and
// the regenerated object committed, and every ABI change both sides and the header.
package kprt
