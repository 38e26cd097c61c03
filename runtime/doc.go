// Package kprt (folder runtime/) is kprewrite's run-time support as Go sees it: the
// object the freestanding C and assembler of src/ and include/ are built into
// (Object, kprewrite_rt.o, made by `go generate ./runtime` and checked byte for byte
// in CI), the Go mirror of its ABI (abi.go: include/kprewrite_abi.h's structures,
// constants and symbols; abi_test.go compares them with the header), and the encoder
// of the probe tables the runtime reads at start-up (Tables.Encode).
//
// Importers name it kprt, not runtime, so the standard library's stays visible. What
// the runtime does at each probe hit, and what that costs, is in docs/runtime.md;
// what to watch: every change to src/ or include/ needs `go generate ./runtime` and
// the regenerated object committed, and every ABI change both sides and the header.
package kprt
