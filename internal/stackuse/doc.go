// Package stackuse bounds the stack a function of a relocatable object can use: gcc's
// -fstack-usage frames (the .su files) summed over the deepest path of the objects' call
// graph.
//
// The graph is read from the machine code, not from the relocations alone: the
// assembler resolves a call to a static function of the same section without leaving a
// relocation, so every function is decoded (internal/x86dec) and each direct call, and
// each jmp or jcc that leaves the function (a tail call), is an edge: to the function a
// relocation at the branch's rel32 field names, else to the function of the same section
// the branch lands in. A call or jmp through a pointer is an edge to every function
// whose address the objects take (a relocation that is not a branch's target), which
// over-approximates and never misses a callee in a closed set of objects. Functions no
// object defines are asked of the caller (Extern): the runtime's API has a bound of its
// own, a function of the probed program has none that can be measured.
//
// A path that can grow without bound is a Problem, never a number: recursion (directly,
// through other functions, or through a call by pointer), a dynamic frame gcc could not
// bound (alloca, variable-length arrays), or code that does not decode.
package stackuse
