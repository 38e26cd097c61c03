package patch

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/trampolines"
)

// Int3 is the breakpoint instruction every int3 probe writes.
const Int3 = trampolines.Int3

// ErrEdit is wrapped by every refused edit.
var ErrEdit = errors.New("cannot patch")

// Edit is one recorded change of the original program.
type Edit struct {
	Addr uint64
	Orig []byte // the bytes it replaces, as the input file holds them
	New  []byte
}

// Patcher records edits of the original program's bytes with what they replace, so
// each can be undone until Commit. read returns n original bytes at addr. Edits are
// kept sorted by address, so recording n of them in address order costs O(n log n).
type Patcher struct {
	read      func(addr, n uint64) ([]byte, error)
	edits     map[uint64]*Edit
	order     []uint64 // edit addresses, sorted
	committed bool
}

// NewPatcher returns a patcher over the bytes read gives (elfio.File.Bytes).
func NewPatcher(read func(addr, n uint64) ([]byte, error)) *Patcher {
	return &Patcher{read: read, edits: map[uint64]*Edit{}}
}

// Write records replacing len(b) bytes at addr with b. It refuses edits that overlap
// another edit, and bytes that are not in the file.
func (p *Patcher) Write(addr uint64, b []byte) error {
	if p.committed {
		return fmt.Errorf("%w %#x: the edits are committed", ErrEdit, addr)
	}
	if len(b) == 0 {
		return fmt.Errorf("%w %#x: empty edit", ErrEdit, addr)
	}
	end := addr + uint64(len(b))
	if end < addr {
		return fmt.Errorf("%w %#x: edit wraps around", ErrEdit, addr)
	}
	// the first edit at or after addr, and the one before it
	i, _ := slices.BinarySearch(p.order, addr)
	if err := p.overlap(addr, b, i-1, i); err != nil {
		return err
	}
	orig, err := p.read(addr, uint64(len(b)))
	if err != nil {
		return fmt.Errorf("%w %#x: %w", ErrEdit, addr, err)
	}
	p.edits[addr] = &Edit{Addr: addr, Orig: bytes.Clone(orig), New: bytes.Clone(b)}
	p.order = slices.Insert(p.order, i, addr)
	return nil
}

// overlap refuses writing b at addr over the edits at positions ks of the order.
func (p *Patcher) overlap(addr uint64, b []byte, ks ...int) error {
	end := addr + uint64(len(b))
	for _, k := range ks {
		if k < 0 || k >= len(p.order) {
			continue
		}
		e := p.edits[p.order[k]]
		if addr < e.Addr+uint64(len(e.New)) && e.Addr < end {
			return fmt.Errorf("%w %#x+%d: overlaps the edit at %#x+%d", ErrEdit, addr, len(b), e.Addr, len(e.New))
		}
	}
	return nil
}

// Int3 records an int3 at addr, refusing an address that already holds one (a
// debugger breakpoint or a deliberate trap: the runtime could not tell it from a probe).
func (p *Patcher) Int3(addr uint64) error {
	orig, err := p.read(addr, 1)
	if err != nil {
		return fmt.Errorf("%w %#x: %w", ErrEdit, addr, err)
	}
	if orig[0] == Int3 {
		return fmt.Errorf("%w %#x: the original byte is already an int3", ErrEdit, addr)
	}
	return p.Write(addr, []byte{Int3})
}

// Undo drops the edit at addr.
func (p *Patcher) Undo(addr uint64) error {
	if p.committed {
		return fmt.Errorf("%w %#x: the edits are committed", ErrEdit, addr)
	}
	if _, ok := p.edits[addr]; !ok {
		return fmt.Errorf("%w %#x: no edit to undo", ErrEdit, addr)
	}
	delete(p.edits, addr)
	i, _ := slices.BinarySearch(p.order, addr)
	p.order = slices.Delete(p.order, i, i+1)
	return nil
}

// Replace swaps the edit at addr for one writing b (the same checks as Write); the
// old edit stays when the new one is refused. The edit keeps its place in the order,
// so replacing every edit of a plan costs O(n log n), not O(n^2).
func (p *Patcher) Replace(addr uint64, b []byte) error {
	if p.committed {
		return fmt.Errorf("%w %#x: the edits are committed", ErrEdit, addr)
	}
	if _, ok := p.edits[addr]; !ok {
		return fmt.Errorf("%w %#x: no edit to replace", ErrEdit, addr)
	}
	if len(b) == 0 {
		return fmt.Errorf("%w %#x: empty edit", ErrEdit, addr)
	}
	end := addr + uint64(len(b))
	if end < addr {
		return fmt.Errorf("%w %#x: edit wraps around", ErrEdit, addr)
	}
	i, _ := slices.BinarySearch(p.order, addr) // p.order[i] == addr
	if err := p.overlap(addr, b, i-1, i+1); err != nil {
		return err
	}
	orig, err := p.read(addr, uint64(len(b)))
	if err != nil {
		return fmt.Errorf("%w %#x: %w", ErrEdit, addr, err)
	}
	p.edits[addr] = &Edit{Addr: addr, Orig: bytes.Clone(orig), New: bytes.Clone(b)}
	return nil
}

// Edits returns the recorded edits sorted by address.
func (p *Patcher) Edits() []Edit {
	out := make([]Edit, 0, len(p.order))
	for _, a := range p.order {
		out = append(out, *p.edits[a])
	}
	return out
}

// FileEdits records the edits of a rewrite without probes (the dynamic section's, for
// the library copies a program loads) and commits them.
func FileEdits(read func(addr, n uint64) ([]byte, error), what string, ps []elfio.Patch) ([]elfio.Patch, []Edit, error) {
	p := NewPatcher(read)
	if err := addEdits(p, what, ps); err != nil {
		return nil, nil, err
	}
	return p.Commit(), p.Edits(), nil
}

// Commit freezes the edits and returns them as elfio patches, sorted by address.
func (p *Patcher) Commit() []elfio.Patch {
	p.committed = true
	var out []elfio.Patch
	for _, e := range p.Edits() {
		out = append(out, elfio.Patch{Addr: e.Addr, Bytes: bytes.Clone(e.New)})
	}
	return out
}
