package ehframe

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; every error returned by this package wraps one of them.
var (
	// ErrTruncated: a field runs past the end of its entry or section.
	ErrTruncated = errors.New("truncated data")
	// ErrBadEncoding: a DW_EH_PE pointer encoding or LEB128 value is invalid.
	ErrBadEncoding = errors.New("invalid encoding")
	// ErrBadEntry: a CIE, FDE or LSDA is structurally inconsistent.
	ErrBadEntry = errors.New("malformed entry")
	// ErrUnsupported: valid data that this package cannot resolve (e.g. an
	// indirect LSDA pointer, or an unknown CIE augmentation without 'z').
	ErrUnsupported = errors.New("unsupported")
	// ErrOutOfRange: a pointer lies outside the section it must point into.
	ErrOutOfRange = errors.New("address out of range")
)

// maxErrors bounds how many entry errors are kept, so garbage input cannot
// make an error list as large as the section.
const maxErrors = 64

// NoOffset is EntryError.Offset for an entry that lies outside its section
// (an LSDA pointer that misses .gcc_except_table).
const NoOffset = ^uint64(0)

// EntryError reports one CIE, FDE or LSDA that could not be decoded.
type EntryError struct {
	Section string // ".eh_frame" or ".gcc_except_table"
	Kind    string // "CIE", "FDE", "LSDA" or "entry" (length word unreadable)
	Offset  uint64 // offset of the entry inside Section, or NoOffset
	Addr    uint64 // virtual address of the entry (0 when not known)
	Err     error
}

func (e *EntryError) Error() string {
	switch {
	case e.Offset == NoOffset:
		return fmt.Sprintf("%s %s at address %#x: %v", e.Section, e.Kind, e.Addr, e.Err)
	case e.Addr != 0:
		return fmt.Sprintf("%s %s at offset %#x (address %#x): %v", e.Section, e.Kind, e.Offset, e.Addr, e.Err)
	}
	return fmt.Sprintf("%s %s at offset %#x: %v", e.Section, e.Kind, e.Offset, e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }

// Errors collects the per-entry errors of one Parse or LandingPads call.
// errors.Is and errors.As see every kept entry error.
type Errors struct {
	List    []*EntryError // the first maxErrors failures, in section order
	Dropped int           // failures not kept in List
}

func (e *Errors) Error() string {
	if len(e.List) == 0 {
		return "no errors"
	}
	var b strings.Builder
	b.WriteString(e.List[0].Error())
	if n := len(e.List) - 1 + e.Dropped; n > 0 {
		fmt.Fprintf(&b, " (and %d more bad entries)", n)
	}
	return b.String()
}

// Unwrap lets errors.Is / errors.As inspect every kept entry error.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.List))
	for i, x := range e.List {
		errs[i] = x
	}
	return errs
}

func (e *Errors) add(x *EntryError) {
	if len(e.List) < maxErrors {
		e.List = append(e.List, x)
	} else {
		e.Dropped++
	}
}

// err returns nil when nothing was recorded, so callers can return it as is.
func (e *Errors) err() error {
	if len(e.List) == 0 {
		return nil
	}
	return e
}
