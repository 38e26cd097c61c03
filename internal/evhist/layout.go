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
	// TagDead marks a bucket a writer won as the table filled: no entry, skipped.
	TagDead = 2
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
	fields, fixed := s.progFields()
	l := s.Link
	if l == nil {
		l = &Link{}
	}
	b := s.progHeader(l, len(fields), fixed)
	for _, f := range fields {
		b = s.appendField(b, f)
	}
	b = s.appendVarOps(b, l, fixed)
	b = appendRefs(b, l, slotOf)
	for _, p := range l.Params {
		b = append(b, p.Kind, 0)
		b = binary.LittleEndian.AppendUint16(b, uint16(p.Idx))
	}
	b = appendTargets(b, l, slotOf)
	if a := s.Tracker(); a != nil {
		b = s.appendTrack(b, a)
	}
	if sy := l.Synth; sy != nil && sy.ID != 0 && slotOf != nil {
		b[2] |= FlagRecord
		b = appendRecord(b, sy, len(l.Params), slotOf)
	}
	return b
}

// progFields lists the program's fields: the keys, the values (fixed counts them),
// then the fields the variables' expressions read.
func (s *Spec) progFields() (fields []*Field, fixed int) {
	for i := range s.Keys {
		fields = append(fields, &s.Keys[i])
	}
	for i := range s.Vals {
		fields = append(fields, &s.Vals[i])
	}
	fixed = len(fields)
	for _, v := range s.Vars { // operand fields after the keys and values
		for _, o := range v.Expr {
			if o.Field != nil {
				fields = append(fields, o.Field)
			}
		}
	}
	return fields, fixed
}

// progHeader is the program's 16-byte header: the counts, the flags known before
// the blocks are laid out, the table's size and its key and entry words.
func (s *Spec) progHeader(l *Link, nfields, fixed int) []byte {
	le := binary.LittleEndian
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
	b[12], b[13], b[14], b[15] = byte(nfields-fixed), byte(len(l.Refs)), byte(len(l.Params)), byte(len(l.Targets))
	return b
}

// appendVarOps appends each variable's expression: 4 operands of 4 bytes (kind,
// minus, index), a field operand indexing the fields after the first fixed ones in
// order, a reference indexing the link's Refs.
func (s *Spec) appendVarOps(b []byte, l *Link, fixed int) []byte {
	le := binary.LittleEndian
	next := fixed
	for _, v := range s.Vars {
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
	return b
}

// appendRefs appends where each variable read from another histogram lives: u32
// slot, u32 entries, u16 entry words, set word, var word, bit.
func appendRefs(b []byte, l *Link, slotOf func(key string, words uint32) uint32) []byte {
	le := binary.LittleEndian
	for _, r := range l.Refs {
		b = le.AppendUint32(b, slotOf(r.Key, uint32(r.Of.TableWords())))
		b = le.AppendUint32(b, uint32(r.Of.Size()))
		b = le.AppendUint16(b, uint16(r.Of.EntryWords()))
		b = le.AppendUint16(b, uint16(r.Of.varsOff()))
		b = le.AppendUint16(b, uint16(r.Of.varsOff()+1+r.Var))
		b = le.AppendUint16(b, uint16(r.Var))
	}
	return b
}

// appendTargets appends the synthetic event's histograms this one feeds: u32 slot,
// u32 length (TargetFilter: a filter follows), its program, then the filter (u32
// length, its program, to 4 bytes).
func appendTargets(b []byte, l *Link, slotOf func(key string, words uint32) uint32) []byte {
	le := binary.LittleEndian
	for _, t := range l.Targets {
		tp := t.Of.Program(nil)
		b = le.AppendUint32(b, slotOf(t.Key, uint32(t.Of.TableWords())))
		n := uint32(len(tp))
		if t.Filter != nil {
			n |= TargetFilter
		}
		b = le.AppendUint32(b, n)
		b = append(b, tp...)
		if t.Filter != nil {
			b = le.AppendUint32(b, uint32(len(t.Filter)))
			b = append(b, t.Filter...)
			b = append(b, make([]byte, (4-len(t.Filter)%4)%4)...)
		}
	}
	return b
}

// appendTrack appends the onmax/onchange block: u8 handler, variable, nsave,
// actions; u16 the tracked value's word, 0; the saved fields.
func (s *Spec) appendTrack(b []byte, a *Action) []byte {
	le := binary.LittleEndian
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
	return b
}

// appendRecord appends the record block of a histogram whose action generates a
// synthetic event (recordBlock), then the event's filter when it has one.
func appendRecord(b []byte, sy *Synthetic, nparams int, slotOf func(key string, words uint32) uint32) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, sy.ID)
	b = le.AppendUint32(b, slotOf(SwitchKey(sy.Name), 1))
	fl := byte(0)
	if sy.Disabled {
		fl |= recDisabled
	}
	if sy.Filter != nil {
		fl |= recFiltered
	}
	b = append(b, fl, byte(nparams), 0, 0)
	if sy.Filter != nil {
		b = le.AppendUint32(b, uint32(len(sy.Filter)))
		b = append(b, sy.Filter...)
		b = append(b, make([]byte, (4-len(sy.Filter)%4)%4)...)
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

// checkProgram checks program p (a target's when not top: no links of its own, no
// track or record block) and returns its table words and the bytes it used.
func checkProgram(p []byte, top bool) (words, used int, err error) {
	ps, err := checkHeader(p, top)
	if err != nil {
		return 0, 0, err
	}
	if err := ps.checkFields(p); err != nil {
		return 0, 0, err
	}
	if err := ps.checkEntry(p, top); err != nil {
		return 0, 0, err
	}
	off, err := ps.checkLinks(p)
	if err != nil {
		return 0, 0, err
	}
	if off, err = ps.checkTargets(p, off); err != nil {
		return 0, 0, err
	}
	words = HeaderWords + 2*ps.size*ps.ew
	if ps.track { // as src/rt_hist.c's check
		var snap bool
		if off, snap, err = ps.checkTrack(p, off); err != nil {
			return 0, 0, err
		}
		if snap {
			words += SnapWords
		}
	}
	if p[2]&FlagRecord != 0 { // as src/rt_hist.c's check
		if off, err = ps.checkRecord(p, off, top); err != nil {
			return 0, 0, err
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

// progShape is what a program's header declares: its counts of keys, values,
// variables, operand fields, references, parameters and targets, its fields (nf),
// the table's entries, key and entry words, whether a track block follows, and the
// entry words the fields need (want, set by checkEntry).
type progShape struct {
	nk, nv, nvars, nx, nrefs, nparams, ntargets int
	nf, size, kw, ew, want                      int
	track                                       bool
}

// checkHeader reads the header: counts within the runtime's limits, links only at
// the top, the fields present, a power-of-two size within MinBits..MaxBits.
func checkHeader(p []byte, top bool) (*progShape, error) {
	le := binary.LittleEndian
	if len(p) < progHeader {
		return nil, errProgram
	}
	ps := &progShape{nk: int(p[0]), nv: int(p[1]), nvars: int(p[3]),
		nx: int(p[12]), nrefs: int(p[13]), nparams: int(p[14]), ntargets: int(p[15])}
	if ps.nk == 0 || ps.nk > MaxKeys || ps.nv > MaxVals || ps.nvars > MaxVars || ps.nx > MaxVars*MaxOperands {
		return nil, errProgram
	}
	if !top && (ps.nrefs|ps.nparams|ps.ntargets) != 0 || ps.nrefs > MaxRefs || ps.nparams > MaxVars || ps.ntargets > 32 {
		return nil, errProgram
	}
	ps.nf = ps.nk + ps.nv + ps.nx
	if len(p) < progHeader+progField*ps.nf {
		return nil, errProgram
	}
	ps.size = int(le.Uint32(p[4:]))
	ps.kw, ps.ew = int(le.Uint16(p[8:])), int(le.Uint16(p[10:]))
	if ps.size < 1<<MinBits || ps.size > 1<<MaxBits || ps.size&(ps.size-1) != 0 {
		return nil, errProgram
	}
	return ps, nil
}

// checkFields checks each field: a known source and modifier, 1 to 8 bytes; a stack
// only as a key of StackDepth words; a string or comm only as a key of its words;
// a .buckets size not 0. The keys' words must be the header's key words (checkEntry).
func (ps *progShape) checkFields(p []byte) error {
	le := binary.LittleEndian
	for i := 0; i < ps.nf; i++ {
		e := p[progHeader+i*progField:]
		w := int(le.Uint16(e[6:]))
		if evfilter.Source(e[0]) > SrcStack || Modifier(e[1]) > ModUsecs || e[2] == 0 || e[2] > 8 {
			return errProgram
		}
		stack := e[3]&8 != 0
		if stack != (evfilter.Source(e[0]) == SrcStack) || stack && (i >= ps.nk || w != StackDepth || e[3] != 8) {
			return errProgram
		}
		if !stack && (e[3]&2 != 0 && (i >= ps.nk || (w != StringKeyLen/8 && w != CommLen/8)) || e[3]&2 == 0 && w != 1) {
			return errProgram
		}
		if Modifier(e[1]) == ModBuckets && le.Uint64(e[8:]) == 0 {
			return errProgram
		}
	}
	return nil
}

// checkEntry checks the entry's layout: the keys' words are the header's, and the
// entry words are what the tag, keys, count, values, variables and comm take, more
// only for a track block (which only a top program has).
func (ps *progShape) checkEntry(p []byte, top bool) error {
	le := binary.LittleEndian
	sum := 0
	for i := 0; i < ps.nk; i++ {
		sum += int(le.Uint16(p[progHeader+i*progField+6:]))
	}
	ps.want = 1 + sum + 1 + ps.nv
	if ps.nvars > 0 {
		ps.want += 1 + ps.nvars
	}
	if p[2]&FlagComm != 0 {
		ps.want += CommLen / 8
	}
	ps.track = p[2]&FlagTrack != 0
	if sum != ps.kw || ps.ew < ps.want || !ps.track && ps.ew != ps.want || ps.track && !top {
		return errProgram
	}
	return nil
}

// checkLinks checks the variables' operands (a field operand names an operand
// field, a reference one of the references), the references' tables (a
// power-of-two size, words inside the entry) and the parameters (a reference or a
// variable that exists); it returns the offset after them.
func (ps *progShape) checkLinks(p []byte) (int, error) {
	le := binary.LittleEndian
	off := progHeader + progField*ps.nf
	if len(p) < off+16*ps.nvars+16*ps.nrefs+4*ps.nparams {
		return 0, errProgram
	}
	for v := 0; v < ps.nvars; v++ {
		for k := 0; k < MaxOperands; k++ {
			op := p[off+16*v+4*k:]
			idx := int(le.Uint16(op[2:]))
			switch op[0] {
			case OpNone, OpConst:
			case OpField:
				if idx < ps.nk+ps.nv || idx >= ps.nf {
					return 0, errProgram
				}
			case OpRef:
				if idx >= ps.nrefs {
					return 0, errProgram
				}
			default:
				return 0, errProgram
			}
		}
	}
	off += 16 * ps.nvars
	for r := 0; r < ps.nrefs; r++ {
		e := p[off+16*r:]
		rs, rew := int(le.Uint32(e[4:])), int(le.Uint16(e[8:]))
		setw, varw := int(le.Uint16(e[10:])), int(le.Uint16(e[12:]))
		if rs < 1<<MinBits || rs > 1<<MaxBits || rs&(rs-1) != 0 || setw < 2+ps.kw || setw >= varw || varw >= rew || le.Uint16(e[14:]) >= 64 {
			return 0, errProgram
		}
	}
	off += 16 * ps.nrefs
	for q := 0; q < ps.nparams; q++ {
		e := p[off+4*q:]
		idx := int(le.Uint16(e[2:]))
		if e[0] == OpRef && idx >= ps.nrefs || e[0] == OpVar && idx >= ps.nvars || e[0] != OpRef && e[0] != OpVar {
			return 0, errProgram
		}
	}
	return off + 4*ps.nparams, nil
}

// checkTargets checks each target at off: a program that is itself valid (and uses
// all its length), then its filter when the length word says one follows.
func (ps *progShape) checkTargets(p []byte, off int) (int, error) {
	le := binary.LittleEndian
	for t := 0; t < ps.ntargets; t++ {
		if len(p) < off+8 {
			return 0, errProgram
		}
		lw := le.Uint32(p[off+4:])
		n := int(lw &^ TargetFilter)
		if n > len(p)-off-8 {
			return 0, errProgram
		}
		if _, u, err := checkProgram(p[off+8:off+8+n], false); err != nil || u != n {
			return 0, errProgram
		}
		off += 8 + n
		if lw&TargetFilter != 0 {
			var err error
			if off, err = skipFilter(p, off); err != nil {
				return 0, err
			}
		}
	}
	return off, nil
}

// checkTrack checks the track block at off: a handler and actions the runtime knows,
// a variable that exists, saved fields exactly when save() is an action (each one
// word, or a string's or comm's), the tracked value's word after the entry's fields
// and the saved words at the entry's end. snap: the table has SnapWords more.
func (ps *progShape) checkTrack(p []byte, off int) (_ int, snap bool, _ error) {
	le := binary.LittleEndian
	if len(p) < off+trackBlock {
		return 0, false, errProgram
	}
	t := p[off:]
	nsave, do, sw := int(t[2]), t[3], 0
	if t[0] < 1 || t[0] > 2 || int(t[1]) >= ps.nvars || nsave > MaxSave || do == 0 || do > 7 ||
		(do&doSave == 0) != (nsave == 0) || int(le.Uint16(t[4:])) != ps.want || le.Uint16(t[6:]) != 0 ||
		len(p)-off-trackBlock < progField*nsave {
		return 0, false, errProgram
	}
	for i := 0; i < nsave; i++ {
		e := t[trackBlock+progField*i:]
		w := int(le.Uint16(e[6:]))
		if evfilter.Source(e[0]) >= SrcStack || e[1] != byte(ModNone) || e[2] == 0 || e[2] > 8 || e[3]&8 != 0 ||
			e[3]&2 != 0 && w != StringKeyLen/8 && w != CommLen/8 || e[3]&2 == 0 && w != 1 {
			return 0, false, errProgram
		}
		sw += w
	}
	if ps.ew != ps.want+2+sw {
		return 0, false, errProgram
	}
	return off + trackBlock + progField*nsave, do&doSnapshot != 0, nil
}

// checkRecord checks the record block at off (a top program's with parameters): a
// synthetic event id, a switch slot inside the control area, known flags, one
// field per parameter; then the event's filter when it has one.
func (ps *progShape) checkRecord(p []byte, off int, top bool) (int, error) {
	le := binary.LittleEndian
	if !top || ps.nparams == 0 || len(p) < off+recordBlock {
		return 0, errProgram
	}
	r := p[off:]
	if le.Uint32(r) == 0 || le.Uint32(r[4:]) >= MaxSlots || r[8] > recDisabled|recFiltered || int(r[9]) != ps.nparams || r[10] != 0 || r[11] != 0 {
		return 0, errProgram
	}
	off += recordBlock
	if r[8]&recFiltered != 0 { // the synthetic event's filter
		return skipFilter(p, off)
	}
	return off, nil
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
