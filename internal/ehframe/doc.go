// Package ehframe decodes the unwind tables of x86-64 ELF programs (.eh_frame FDEs
// and their CFA rules, .gcc_except_table landing pads, .eh_frame_hdr search tables)
// and encodes new .eh_frame_hdr search tables.
//
// It decodes the unwind tables that the safety analysis and the rewriter need:
//
//   - .eh_frame CIEs and FDEs, which give function bounds in stripped binaries
//     (the same bounds the unwinder uses), and the LSDA pointer of each FDE;
//   - the LSDA call-site tables in .gcc_except_table, which give the C++
//     exception landing pads. A jump-optimized probe must never cover a
//     landing pad: the unwinder would resume in the middle of the jmp;
//   - the .eh_frame_hdr search table (ParseHdr), and a new one (EncodeHdr) in
//     the form ld writes and libgcc binary-searches, for the rewrite that adds
//     the return trampoline's FDE.
//
// The package parses byte slices only. The caller reads the ELF file and passes
// each section's bytes together with its virtual address, so every decoded
// pointer comes back as a virtual address in the original image.
//
// Error policy: parsing never panics and never stops at the first bad entry if
// it can go on. Parse and LandingPads return everything they could decode plus
// an *Errors value listing the entries they had to skip (each an *EntryError
// naming the section, the entry kind and its offset). Only an entry whose
// length field is unreadable or runs past the end of the section stops Parse,
// because the position of the next entry is then unknown. Callers doing safety
// analysis must treat any error as "the unwind information is incomplete" and
// refuse jump optimization where the missing data could matter.
//
// Decisions that differ between implementations, taken here on purpose:
//
//   - A zero length word is skipped and parsing goes on, as readelf does
//     (libgcc's linear search stops there, but the .eh_frame_hdr table, which
//     the runtime really uses, may still index entries after it).
//   - With a 64-bit length (0xffffffff escape) the CIE id / CIE pointer is
//     still 4 bytes, as the LSB and LLVM's libunwind read it (readelf reads 8).
//   - A raw LSDA pointer of 0 means "no LSDA" whatever its encoding, as in
//     libgcc's read_encoded_value_with_base; pc_begin always gets its base
//     added, as readelf prints it.
//   - An indirect LSDA pointer (DW_EH_PE_indirect) is recorded with
//     FDE.LSDAIndirect set and FDE.LSDA holding the address of the pointer slot;
//     LandingPads reports it as ErrUnsupported because it cannot read the slot.
package ehframe
