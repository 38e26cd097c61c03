package trampolines

import "fmt"

// EntryStubLen is the size of the entry stub of a probe-less rewrite.
const EntryStubLen = 5

// EntryStub returns the entry stub of a rewrite without probes, placed at at: a jmp
// rel32 to the original entry point, which keeps every register and the stack exactly
// as the kernel and the dynamic linker left them. (With probes the entry is the
// runtime's kprewrite_rt_entry, which saves everything, starts the runtime and jumps to
// the original entry the same way.)
func EntryStub(at, origEntry uint64) ([]byte, error) {
	j, err := JmpRel32(at, origEntry)
	if err != nil {
		return nil, fmt.Errorf("entry stub: original entry %#x: %w", origEntry, err)
	}
	return j, nil
}
