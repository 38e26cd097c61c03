package trampolines

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strings"
)

// templateLabels reads the runtime object's countSection (the assembled templates no
// output carries: src/countprobe.S, src/inlinerec.S), which no relocation may touch,
// and the values of the labels named prefix<template>.<label>, by template.
func templateLabels(obj []byte, prefix string) ([]byte, map[string]map[string]uint64, error) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		return nil, nil, fmt.Errorf("runtime object: %w", err)
	}
	sec := f.Section(countSection)
	if sec == nil {
		return nil, nil, fmt.Errorf("runtime object: no section %s", countSection)
	}
	if sec.Flags&elf.SHF_ALLOC != 0 {
		return nil, nil, fmt.Errorf("runtime object: section %s is allocated: outputs would carry it", countSection)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, nil, fmt.Errorf("runtime object %s: %w", countSection, err)
	}
	var idx elf.SectionIndex
	for i, s := range f.Sections {
		if s == sec {
			idx = elf.SectionIndex(i)
		}
	}
	if err := noRelocations(f, idx, 0, uint64(len(data))); err != nil {
		return nil, nil, err
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, nil, fmt.Errorf("runtime object symbols: %w", err)
	}
	raw := map[string]map[string]uint64{}
	for _, s := range syms {
		rest, ok := strings.CutPrefix(s.Name, prefix)
		if !ok {
			continue
		}
		name, label, ok := strings.Cut(rest, ".")
		if !ok || s.Section != idx {
			return nil, nil, fmt.Errorf("runtime object: %s is not a template label in %s", s.Name, countSection)
		}
		if raw[name] == nil {
			raw[name] = map[string]uint64{}
		}
		if _, dup := raw[name][label]; dup {
			return nil, nil, fmt.Errorf("runtime object: two symbols %s", s.Name)
		}
		raw[name][label] = s.Value
	}
	return data, raw, nil
}

// noRelocations checks that no relocation of f touches [start, end) of section sec:
// templates' fields are raw bytes, written by the rewriter alone.
func noRelocations(f *elf.File, sec elf.SectionIndex, start, end uint64) error {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || elf.SectionIndex(s.Info) != sec {
			continue
		}
		rel, err := s.Data()
		if err != nil {
			return fmt.Errorf("runtime object %s: %w", s.Name, err)
		}
		for i := 0; i+24 <= len(rel); i += 24 {
			if off := binary.LittleEndian.Uint64(rel[i:]); off >= start && off < end {
				return fmt.Errorf("runtime object: relocation at template offset %#x", off-start)
			}
		}
	}
	return nil
}
