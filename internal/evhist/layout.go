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
	FlagTrack   = 4 // a track block (onmax/onchange) follows the targets
	// FlagRecord: a record block follows (the track block, else the targets): the
	// synthetic event the action generates is written to the trace file too
	FlagRecord = 8
	// TargetFilter marks a target's length word: the synthetic histogram's filter
	// (its "if", an evfilter program) follows its program
	TargetFilter = 1 << 31
	// SnapWords are the words after the buckets of a histogram with onmax().snapshot()
	// or onchange().snapshot(): a lock, the global tracked value, the bucket (+1) whose
	// entry set it, reserved.
	SnapWords = 4

	// the track block's action bits
	doSave     = 1
	doSnapshot = 2
	doTrace    = 4
	trackBlock = 8
	// recordBlock: u32 the synthetic event's id, u32 the slot of its switch (a word of
	// the control area: bit 0 flips it from its rewrite state), u8 flags (recDisabled:
	// rewritten disabled), u8 its fields (the action's parameters), u16 0
	recordBlock = 12
	recDisabled = 1
	// recFiltered: the synthetic event's filter follows the record block (u32 length,
	// its evfilter program, to 4 bytes)
	recFiltered = 2

	TagBusy = 1
	TagBit  = 1 << 63
	// HashSeed and HashMul make a key's hash as the runtime does (rt_hist.c's mix): h =
	// HashSeed, then for each key word w, h = (h ^ w) * HashMul; h ^= h >> 29. Its
	// bucket is h & (buckets - 1), its entry's tag h | TagBit.
	HashSeed = 0x6a09e667f3bcc908
	HashMul  = 0x9e3779b97f4a7c15

	progHeader = 16
	progField  = 16
	// MaxTableBytes bounds one histogram's share of the trace file.
	MaxTableBytes = 64 << 20
	// MaxSlots bounds a control area's words (evtrigger.MaxSlots).
	MaxSlots = 1 << 24
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

// EntryWords is the words of one bucket: tag, key, hitcount, values, the variables
// (a word of set bits, then one per variable), comm, and with onmax()/onchange() the
// tracked value, a lock word and the saved fields.
func (s *Spec) EntryWords() int {
	n := s.trackOff()
	if s.Tracker() != nil {
		n += 2 + s.saveWords()
	}
	return n
}

// trackOff is the word of an entry holding its tracked value.
func (s *Spec) trackOff() int {
	n := s.commOff()
	if s.execname() {
		n += CommLen / 8
	}
	return n
}

func (s *Spec) saveWords() int {
	n := 0
	for i := range s.Save {
		n += s.Save[i].Words()
	}
	return n
}

// varsOff is the word of an entry holding its variables' set bits (the variables
// follow it).
func (s *Spec) varsOff() int { return 1 + s.KeyWords() + 1 + len(s.Vals) }

// commOff is the word of an entry holding its comm.
func (s *Spec) commOff() int {
	n := s.varsOff()
	if len(s.Vars) > 0 {
		n += 1 + len(s.Vars)
	}
	return n
}

// Buckets is the table's buckets: twice its entries, as the kernel's tracing_map.
func (s *Spec) Buckets() int { return 2 * s.Size() }

// TableWords is the histogram's words in the control area.
func (s *Spec) TableWords() int {
	n := HeaderWords + s.Buckets()*s.EntryWords()
	if s.has("snapshot") {
		n += SnapWords
	}
	return n
}

// Check refuses a histogram too large for a trace file.
func (s *Spec) Check() error {
	if b := s.TableWords() * 8; b > MaxTableBytes {
		return fmt.Errorf("a histogram of %d entries of %d bytes takes %d MiB of the trace file; at most %d MiB (lower size=)",
			s.Size(), s.EntryWords()*8, b>>20, MaxTableBytes>>20)
	}
	return nil
}

// Program encodes the histogram for the runtime (doc.go). slotOf gives the first
// word of another histogram's table by its key (the tables of the variables it reads
// and of the synthetic event's histograms it feeds); nil when it has no Link.
func (s *Spec) Program(slotOf func(key string, words uint32) uint32) []byte {
	le := binary.LittleEndian
	fields := []*Field{}
	for i := range s.Keys {
		fields = append(fields, &s.Keys[i])
	}
	for i := range s.Vals {
		fields = append(fields, &s.Vals[i])
	}
	fixed := len(fields)
	for _, v := range s.Vars { // operand fields after the keys and values
		for _, o := range v.Expr {
			if o.Field != nil {
				fields = append(fields, o.Field)
			}
		}
	}
	l := s.Link
	if l == nil {
		l = &Link{}
	}
	b := make([]byte, progHeader, 256)
	b[0], b[1], b[3] = byte(len(s.Keys)), byte(len(s.Vals)), byte(len(s.Vars))
	if s.Pause {
		b[2] |= FlagPaused
	}
	if s.execname() {
		b[2] |= FlagComm
	}
	if s.Tracker() != nil {
		b[2] |= FlagTrack
	}
	le.PutUint32(b[4:], uint32(s.Size()))
	le.PutUint16(b[8:], uint16(s.KeyWords()))
	le.PutUint16(b[10:], uint16(s.EntryWords()))
	b[12], b[13], b[14], b[15] = byte(len(fields)-fixed), byte(len(l.Refs)), byte(len(l.Params)), byte(len(l.Targets))
	for _, f := range fields {
		b = s.appendField(b, f)
	}
	next := fixed
	for _, v := range s.Vars { // 4 operands of 4 bytes: kind, minus, index
		var e [4 * MaxOperands]byte
		for k, o := range v.Expr {
			op := e[4*k:]
			if o.Minus {
				op[1] = 1
			}
			switch {
			case o.Field != nil:
				op[0] = OpField
				le.PutUint16(op[2:], uint16(next))
				next++
			case o.Ref != "":
				op[0] = OpRef
				for i, r := range l.Refs {
					if r.Of.Vars[r.Var].Name == o.Ref {
						le.PutUint16(op[2:], uint16(i))
					}
				}
			default:
				op[0] = OpConst
				le.PutUint16(op[2:], uint16(o.Const))
			}
		}
		b = append(b, e[:]...)
	}
	for _, r := range l.Refs { // u32 slot, u32 entries, u16 entry words, set word, var word, bit
		b = le.AppendUint32(b, slotOf(r.Key, uint32(r.Of.TableWords())))
		b = le.AppendUint32(b, uint32(r.Of.Size()))
		b = le.AppendUint16(b, uint16(r.Of.EntryWords()))
		b = le.AppendUint16(b, uint16(r.Of.varsOff()))
		b = le.AppendUint16(b, uint16(r.Of.varsOff()+1+r.Var))
		b = le.AppendUint16(b, uint16(r.Var))
	}
	for _, p := range l.Params {
		b = append(b, p.Kind, 0)
		b = le.AppendUint16(b, uint16(p.Idx))
	}
	for _, t := range l.Targets { // u32 slot, u32 length (TargetFilter: a filter follows), its program
		tp := t.Of.Program(nil)
		b = le.AppendUint32(b, slotOf(t.Key, uint32(t.Of.TableWords())))
		n := uint32(len(tp))
		if t.Filter != nil {
			n |= TargetFilter
		}
		b = le.AppendUint32(b, n)
		b = append(b, tp...)
		if t.Filter != nil { // u32 length, the filter's program, to 4 bytes
			b = le.AppendUint32(b, uint32(len(t.Filter)))
			b = append(b, t.Filter...)
			b = append(b, make([]byte, (4-len(t.Filter)%4)%4)...)
		}
	}
	if a := s.Tracker(); a != nil { // u8 handler, variable, nsave, actions; u16 word, 0; the saved fields
		handler, do := byte(1), byte(0)
		if a.Handler == "onchange" {
			handler = 2
		}
		if s.has("save") {
			do |= doSave
		}
		if s.has("snapshot") {
			do |= doSnapshot
		}
		if s.has("trace") {
			do |= doTrace
		}
		v := 0
		for i := range s.Vars {
			if s.Vars[i].Name == a.Var {
				v = i
			}
		}
		b = append(b, handler, byte(v), byte(len(s.Save)), do)
		b = le.AppendUint16(b, uint16(s.trackOff()))
		b = le.AppendUint16(b, 0)
		for i := range s.Save {
			b = s.appendField(b, &s.Save[i])
		}
	}
	if sy := l.Synth; sy != nil && sy.ID != 0 && slotOf != nil {
		b[2] |= FlagRecord
		b = le.AppendUint32(b, sy.ID)
		b = le.AppendUint32(b, slotOf(SwitchKey(sy.Name), 1))
		fl := byte(0)
		if sy.Disabled {
			fl |= recDisabled
		}
		if sy.Filter != nil {
			fl |= recFiltered
		}
		b = append(b, fl, byte(len(l.Params)), 0, 0)
		if sy.Filter != nil {
			b = le.AppendUint32(b, uint32(len(sy.Filter)))
			b = append(b, sy.Filter...)
			b = append(b, make([]byte, (4-len(sy.Filter)%4)%4)...)
		}
	}
	return b
}

// SwitchKey is the slot key of a synthetic event's switch (its enable word).
func SwitchKey(name string) string { return "\x00switch\x00synthetic/" + name }

// appendField encodes a field of the program (16 bytes).
func (s *Spec) appendField(b []byte, f *Field) []byte {
	le := binary.LittleEndian
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
	if f.Stack { // frames in the image are kept as link-time addresses, as .sym keys
		e[3] |= 8
		le.PutUint64(e[8:], s.SymLimit)
	}
	return append(b, e[:]...)
}

var errProgram = errors.New("malformed hist program")

// CheckProgram validates a program as the runtime does before using it
// (src/rt_hist.c, kprw_hist_words), and returns the table words it needs.
func CheckProgram(p []byte) (int, error) {
	w, n, err := checkProgram(p, true)
	if err == nil && n != len(p) {
		err = errProgram
	}
	return w, err
}

func checkProgram(p []byte, top bool) (words, used int, err error) {
	le := binary.LittleEndian
	if len(p) < progHeader {
		return 0, 0, errProgram
	}
	nk, nv, nvars := int(p[0]), int(p[1]), int(p[3])
	nx, nrefs, nparams, ntargets := int(p[12]), int(p[13]), int(p[14]), int(p[15])
	if nk == 0 || nk > MaxKeys || nv > MaxVals || nvars > MaxVars || nx > MaxVars*MaxOperands {
		return 0, 0, errProgram
	}
	if !top && (nrefs|nparams|ntargets) != 0 || nrefs > MaxRefs || nparams > MaxVars || ntargets > 32 {
		return 0, 0, errProgram
	}
	nf := nk + nv + nx
	off := progHeader + progField*nf
	if len(p) < off {
		return 0, 0, errProgram
	}
	size := int(le.Uint32(p[4:]))
	kw, ew := int(le.Uint16(p[8:])), int(le.Uint16(p[10:]))
	if size < 1<<MinBits || size > 1<<MaxBits || size&(size-1) != 0 {
		return 0, 0, errProgram
	}
	sum := 0
	for i := 0; i < nf; i++ {
		e := p[progHeader+i*progField:]
		w := int(le.Uint16(e[6:]))
		if evfilter.Source(e[0]) > SrcStack || Modifier(e[1]) > ModUsecs || e[2] == 0 || e[2] > 8 {
			return 0, 0, errProgram
		}
		stack := e[3]&8 != 0
		if stack != (evfilter.Source(e[0]) == SrcStack) || stack && (i >= nk || w != StackDepth || e[3] != 8) {
			return 0, 0, errProgram
		}
		if !stack && (e[3]&2 != 0 && (i >= nk || (w != StringKeyLen/8 && w != CommLen/8)) || e[3]&2 == 0 && w != 1) {
			return 0, 0, errProgram
		}
		if Modifier(e[1]) == ModBuckets && le.Uint64(e[8:]) == 0 {
			return 0, 0, errProgram
		}
		if i < nk {
			sum += w
		}
	}
	want := 1 + sum + 1 + nv
	if nvars > 0 {
		want += 1 + nvars
	}
	if p[2]&FlagComm != 0 {
		want += CommLen / 8
	}
	track := p[2]&FlagTrack != 0
	if sum != kw || ew < want || !track && ew != want || track && !top {
		return 0, 0, errProgram
	}
	if len(p) < off+16*nvars+16*nrefs+4*nparams {
		return 0, 0, errProgram
	}
	for v := 0; v < nvars; v++ {
		for k := 0; k < MaxOperands; k++ {
			op := p[off+16*v+4*k:]
			idx := int(le.Uint16(op[2:]))
			switch op[0] {
			case OpNone, OpConst:
			case OpField:
				if idx < nk+nv || idx >= nf {
					return 0, 0, errProgram
				}
			case OpRef:
				if idx >= nrefs {
					return 0, 0, errProgram
				}
			default:
				return 0, 0, errProgram
			}
		}
	}
	off += 16 * nvars
	for r := 0; r < nrefs; r++ {
		e := p[off+16*r:]
		rs, rew := int(le.Uint32(e[4:])), int(le.Uint16(e[8:]))
		setw, varw := int(le.Uint16(e[10:])), int(le.Uint16(e[12:]))
		if rs < 1<<MinBits || rs > 1<<MaxBits || rs&(rs-1) != 0 || setw < 2+kw || setw >= varw || varw >= rew || le.Uint16(e[14:]) >= 64 {
			return 0, 0, errProgram
		}
	}
	off += 16 * nrefs
	for q := 0; q < nparams; q++ {
		e := p[off+4*q:]
		idx := int(le.Uint16(e[2:]))
		if e[0] == OpRef && idx >= nrefs || e[0] == OpVar && idx >= nvars || e[0] != OpRef && e[0] != OpVar {
			return 0, 0, errProgram
		}
	}
	off += 4 * nparams
	for t := 0; t < ntargets; t++ {
		if len(p) < off+8 {
			return 0, 0, errProgram
		}
		lw := le.Uint32(p[off+4:])
		n := int(lw &^ TargetFilter)
		if n > len(p)-off-8 {
			return 0, 0, errProgram
		}
		if _, u, err := checkProgram(p[off+8:off+8+n], false); err != nil || u != n {
			return 0, 0, errProgram
		}
		off += 8 + n
		if lw&TargetFilter != 0 {
			if off, err = skipFilter(p, off); err != nil {
				return 0, 0, err
			}
		}
	}
	words = HeaderWords + 2*size*ew
	if track { // as src/rt_hist.c's check
		if len(p) < off+trackBlock {
			return 0, 0, errProgram
		}
		t := p[off:]
		nsave, do, sw := int(t[2]), t[3], 0
		if t[0] < 1 || t[0] > 2 || int(t[1]) >= nvars || nsave > MaxSave || do == 0 || do > 7 ||
			(do&doSave == 0) != (nsave == 0) || int(le.Uint16(t[4:])) != want || le.Uint16(t[6:]) != 0 ||
			len(p)-off-trackBlock < progField*nsave {
			return 0, 0, errProgram
		}
		for i := 0; i < nsave; i++ {
			e := t[trackBlock+progField*i:]
			w := int(le.Uint16(e[6:]))
			if evfilter.Source(e[0]) >= SrcStack || e[1] != byte(ModNone) || e[2] == 0 || e[2] > 8 || e[3]&8 != 0 ||
				e[3]&2 != 0 && w != StringKeyLen/8 && w != CommLen/8 || e[3]&2 == 0 && w != 1 {
				return 0, 0, errProgram
			}
			sw += w
		}
		if ew != want+2+sw {
			return 0, 0, errProgram
		}
		if do&doSnapshot != 0 {
			words += SnapWords
		}
		off += trackBlock + progField*nsave
	}
	if p[2]&FlagRecord != 0 { // as src/rt_hist.c's check
		if !top || nparams == 0 || len(p) < off+recordBlock {
			return 0, 0, errProgram
		}
		r := p[off:]
		if le.Uint32(r) == 0 || le.Uint32(r[4:]) >= MaxSlots || r[8] > recDisabled|recFiltered || int(r[9]) != nparams || r[10] != 0 || r[11] != 0 {
			return 0, 0, errProgram
		}
		off += recordBlock
		if r[8]&recFiltered != 0 { // the synthetic event's filter
			if off, err = skipFilter(p, off); err != nil {
				return 0, 0, err
			}
		}
	}
	if p[2]&^(FlagPaused|FlagComm|FlagTrack|FlagRecord) != 0 {
		return 0, 0, errProgram
	}
	if words*8 > MaxTableBytes {
		return 0, 0, errProgram
	}
	return words, off, nil
}

// skipFilter checks the filter at off of program p (u32 length, an evfilter program,
// to 4 bytes) and returns the offset after it.
func skipFilter(p []byte, off int) (int, error) {
	if len(p) < off+4 {
		return 0, errProgram
	}
	fl := int(binary.LittleEndian.Uint32(p[off:]))
	if fl > len(p)-off-4 || evfilter.Check(p[off+4:off+4+fl]) != nil {
		return 0, errProgram
	}
	off += 4 + (fl+3)&^3
	if off > len(p) {
		return 0, errProgram
	}
	return off, nil
}
