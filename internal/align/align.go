// Package align rounds addresses and sizes up to an alignment, the one piece of
// arithmetic every layout in kprewrite (the ELF writer, the linker, the rewriter's new
// sections) shares.
package align

// Up rounds v up to a multiple of a; an alignment of 0 or 1 leaves v as it is, as an
// ELF section's sh_addralign does.
func Up(v, a uint64) uint64 {
	if a <= 1 {
		return v
	}
	return (v + a - 1) / a * a
}
