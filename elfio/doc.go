// Package elfio reads and writes x86-64 ELF64 executables and shared libraries for
// kprewrite.
//
// A shared library (IsSharedLibrary: libc.so.6, libz.so.1) is rewritten like a
// program, but its runtime starts from a DT_INIT the rewrite gives it (Library,
// LibraryPatches), since the loader never runs a library's entry point; the dynamic
// loader itself (IsDynamicLoader) runs no DT_INIT and is not rewritten.
//
// Reading validates every offset and size itself (debug/elf is only used for its
// constants), discovers functions from .symtab, .dynsym and .eh_frame FDEs (and, for a
// Go program stripped of its symbol table, from .gopclntab), and gives the analysis
// byte-level access to loaded code.
//
// Writing is two steps. PlanLayout fixes where the new code and data will live before
// any of it is generated (trampolines encode these addresses); Rewrite then produces the
// new image. The new areas go in new PT_LOAD segments above every existing one (past
// .bss), within jmp rel32 reach of the code: R (the grown program header table, then
// .kprewrite.rodata, then an optional new .eh_frame_hdr that PT_GNU_EH_FRAME is pointed
// at, see PlanLayoutEH), R-X (.kprewrite.text), RW- (.kprewrite.data, .kprewrite.bss);
// never RWX. An R or R-X segment of 512 KiB or more starts on a 2 MiB boundary of file
// and memory and covers whole 2 MiB pages (p_align 2 MiB), and Output.WriteTo writes in
// 2 MiB pieces, so the kernel can map the probe tables and detours of a big rewrite with
// 2 MiB pages from the page cache's large folios (fewer faults and TLB misses at the
// cost of up to 2 MiB of zeros per segment). The program header table is rewritten at the end of the file with the new
// PT_LOADs right after the last existing one, and PT_PHDR points at it (glibc's ld.so
// derives the PIE load bias from PT_PHDR; Linux 5.18+ derives AT_PHDR from the PT_LOAD
// holding e_phoff; older kernels use e_phoff plus the first PT_LOAD's vaddr-offset, which
// Layout.PhdrAtOldBias reports we matched). Every other program header and section stays
// as it was (but PT_GNU_EH_FRAME and .eh_frame_hdr, with a new .eh_frame_hdr planned); the new sections get names and the new symbols go into .symtab, so objdump,
// gdb and perf see them. Output is deterministic, written atomically, and the input file
// is never modified.
//
// Limitation: binutils' strip and objcopy assume the program header table follows the
// ELF header and produce broken binaries from rewritten ones. Strip before rewriting.
package elfio
