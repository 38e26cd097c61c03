// Package elfio reads and writes x86-64 ELF64 executables for kprewrite.
//
// Reading validates every offset and size itself (debug/elf is only used for its
// constants), discovers functions from .symtab, .dynsym and .eh_frame FDEs, and gives the
// analysis byte-level access to loaded code. Writing adds new named sections in new
// PT_LOAD segments close to the original code, grows the program header table, adds
// symbols for the new code and redirects the entry point; output is deterministic and
// written atomically, and the input file is never modified.
package elfio
