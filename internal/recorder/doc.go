// Package recorder is `kprewrite record`'s drain: the rewritten programs write into a
// ring of blocks in the trace file, and the recorder appends their records to the
// same file in chunks while they run.
//
// It makes a trace file whose record area is a ring of blocks (the kernel's ring
// buffer, per thread instead of per CPU), hands the blocks to the rewritten programs
// through a queue in the file, and while they run copies each block's committed
// records into chunks appended to the same file, then gives the block back (the
// writer that takes it again zeroes it: trace format 4). The programs write into
// memory they have written before (no page allocation per record once warm) and never
// wait: a writer that finds no free block takes one the ring has not used yet
// (Options.RingMax: the ring grows by extents the writers append to the file, making
// their pages present), and only where the ring cannot grow loses its record, counted
// in the header. Since the ring is in the file, a recorder that is killed leaves what
// it had not copied there, and readers take both (internal/tracefile's version 3 and 4
// reader).
package recorder
