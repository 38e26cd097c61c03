package evhist

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kprewrite/kprewrite/internal/evfilter"
)

// Table header words and flags (doc.go).
const (
	HeaderWords = 4
	FlagPaused  = 1
	FlagComm    = 2 // the entries keep the comm of their first thread (.execname)

	TagBusy = 1
	TagBit  = 1 << 63

	progHeader = 16
	progField  = 16
	// MaxTableBytes bounds one histogram's share of the trace file.
	MaxTableBytes = 64 << 20
)

// KeyWords is the words of a key.
func (s *Spec) KeyWords() int {
	n := 0
	for i := range s.Keys {
		n += s.Keys[i].Words()
	}
	return n
}

// execname says whether an entry keeps its thread's comm.
func (s *Spec) execname() bool {
	for i := range s.Keys {
		if s.Keys[i].Mod == ModExecname {
			return true
		}
	}
	return false
}

// EntryWords is the words of one bucket: tag, key, hitcount, values, comm.
func (s *Spec) EntryWords() int {
	n := 1 + s.KeyWords() + 1 + len(s.Vals)
	if s.execname() {
		n += CommLen / 8
	}
	return n
}

// Buckets is the table's buckets: twice its entries, as the kernel's tracing_map.
func (s *Spec) Buckets() int { return 2 * s.Size() }

// TableWords is the histogram's words in the control area.
func (s *Spec) TableWords() int { return HeaderWords + s.Buckets()*s.EntryWords() }

// Check refuses a histogram too large for a trace file.
func (s *Spec) Check() error {
	if b := s.TableWords() * 8; b > MaxTableBytes {
		return fmt.Errorf("a histogram of %d entries of %d bytes takes %d MiB of the trace file; at most %d MiB (lower size=)",
			s.Size(), s.EntryWords()*8, b>>20, MaxTableBytes>>20)
	}
	return nil
}

// Program encodes the histogram's shape for the runtime (doc.go).
func (s *Spec) Program() []byte {
	le := binary.LittleEndian
	b := make([]byte, progHeader, progHeader+progField*(len(s.Keys)+len(s.Vals)))
	b[0], b[1] = byte(len(s.Keys)), byte(len(s.Vals))
	if s.Pause {
		b[2] |= FlagPaused
	}
	if s.execname() {
		b[2] |= FlagComm
	}
	le.PutUint32(b[4:], uint32(s.Size()))
	le.PutUint16(b[8:], uint16(s.KeyWords()))
	le.PutUint16(b[10:], uint16(s.EntryWords()))
	put := func(f *Field) {
		var e [progField]byte
		e[0], e[1], e[2] = byte(f.Src), byte(f.Mod), byte(f.Size)
		if f.Signed {
			e[3] |= 1
		}
		if f.String {
			e[3] |= 2
		}
		if f.Comm {
			e[3] |= 4
		}
		le.PutUint16(e[4:], uint16(f.Off))
		le.PutUint16(e[6:], uint16(f.Words()))
		switch f.Mod {
		case ModBuckets:
			le.PutUint64(e[8:], f.Buckets)
		case ModSym, ModSymOffset:
			le.PutUint64(e[8:], s.SymLimit)
		}
		b = append(b, e[:]...)
	}
	for i := range s.Keys {
		put(&s.Keys[i])
	}
	for i := range s.Vals {
		put(&s.Vals[i])
	}
	return b
}

var errProgram = errors.New("malformed hist program")

// CheckProgram validates a program as the runtime does before using it, and returns
// the table words it needs.
func CheckProgram(p []byte) (int, error) {
	le := binary.LittleEndian
	if len(p) < progHeader {
		return 0, errProgram
	}
	nk, nv := int(p[0]), int(p[1])
	if nk == 0 || nk > MaxKeys || nv > MaxVals || len(p) != progHeader+progField*(nk+nv) {
		return 0, errProgram
	}
	size := int(le.Uint32(p[4:]))
	kw, ew := int(le.Uint16(p[8:])), int(le.Uint16(p[10:]))
	if size < 1<<MinBits || size > 1<<MaxBits || size&(size-1) != 0 {
		return 0, errProgram
	}
	sum := 0
	for i := 0; i < nk+nv; i++ {
		e := p[progHeader+i*progField:]
		w := int(le.Uint16(e[6:]))
		if evfilter.Source(e[0]) > SrcTimestamp || Modifier(e[1]) > ModUsecs || e[2] == 0 || e[2] > 8 {
			return 0, errProgram
		}
		if e[3]&2 != 0 && (i >= nk || (w != StringKeyLen/8 && w != CommLen/8)) || e[3]&2 == 0 && w != 1 {
			return 0, errProgram
		}
		if Modifier(e[1]) == ModBuckets && le.Uint64(e[8:]) == 0 {
			return 0, errProgram
		}
		if i < nk {
			sum += w
		}
	}
	want := 1 + sum + 1 + nv
	if p[2]&FlagComm != 0 {
		want += CommLen / 8
	}
	if sum != kw || ew != want {
		return 0, errProgram
	}
	words := HeaderWords + 2*size*ew
	if words*8 > MaxTableBytes {
		return 0, errProgram
	}
	return words, nil
}
