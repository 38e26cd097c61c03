// Command kprewrite analyses x86-64 ELF programs and shared libraries the way the
// kernel's optprobe code does and rewrites them with kprobe-style probes. Run
// `kprewrite help` for the commands; the implementation lives in
// kprewrite/internal/cli so tests can drive it in-process.
package main
