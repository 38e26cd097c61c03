package srcprobe

import (
	"debug/elf"
	"fmt"
	"strconv"
)

// elfImage maps a library's virtual addresses (the debug information's) to the file
// offsets its LIB:0xOFFSET sites give, as uprobe_events take them.
type elfImage struct {
	path  string
	loads []elf.ProgHeader
}

func openImage(path string) (*elfImage, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read library: %w", err)
	}
	defer f.Close()
	im := &elfImage{path: path}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			im.loads = append(im.loads, p.ProgHeader)
		}
	}
	return im, nil
}

// fileOffset is the file offset of virtual address a, in a segment's file bytes.
func (im *elfImage) fileOffset(a uint64) (uint64, error) {
	for _, p := range im.loads {
		if a >= p.Vaddr && a-p.Vaddr < p.Filesz {
			return a - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("%#x is in no loaded part of %s", a, im.path)
}

// vaddr is the virtual address of the file offset written as hex text.
func (im *elfImage) vaddr(text string) (uint64, error) {
	off, err := strconv.ParseUint(text[2:], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("bad file offset")
	}
	for _, p := range im.loads {
		if off >= p.Off && off-p.Off < p.Filesz {
			return off - p.Off + p.Vaddr, nil
		}
	}
	return 0, fmt.Errorf("file offset %#x is in no loaded part of %s", off, im.path)
}
