# gdb -batch -nx -x gdbvars.py --args PROG: stops at each address of REQ (a JSON
# file: {"main": link-time address of main, "points": {"ADDR": [EXPR...]}}) the
# first time it is reached and writes, for each expression, its value in the
# innermost frame there to OUT: {"ADDR": {"func": NAME, "vals": {EXPR: VALUE}}}, where
# VALUE is {"i": "decimal"}, {"s": "text"}, {"a": ["decimal"...]}, {"e": "NAME",
# "i": "decimal"} for an enum (NAME as gdb prints it), {"f": "repr", "fsize": N}
# for a float or double, {"opt": true} for
# <optimized out>, {"below_sp": true} for an object below the stack pointer (stack
# not allocated yet, which the probe's own frame may have overwritten: nothing to
# compare), {"fault": true} for a string gdb cannot read, or {"err": "..."}.
# PROG is the rewritten program: its trace of the same run is compared with what gdb
# prints, so that stack addresses and uninitialized memory are the same for both.
# It is rewritten with jump-optimized probes only (an int3 probe's SIGTRAP would be
# gdb's), or, with GDBVARS_INT3 set, with int3 probes at the points (see below). The
# script stops after MAX_STOPS stops, whatever happens.
import json
import os

import gdb

req = json.load(open(os.environ["GDBVARS_REQ"]))
gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set print inferior-events off")
gdb.execute("starti", to_string=True)
base = int(gdb.parse_and_eval("(long)&main")) - req["main"]
want = {}
for a in req["points"]:
    addr = int(a, 16)
    bp = gdb.Breakpoint("*%#x" % (addr + base), internal=True)
    want[bp.number] = (a, bp)
out = {}
MAX_STOPS = 5000


def cstr(v, n=-1):
    bs = bytearray()
    i = 0
    while n < 0 or i < n:
        c = int(v[i]) & 0xFF
        if c == 0:
            break
        bs.append(c)
        i += 1
        if i > 4096:
            break
    return bs.decode("latin-1")


def fmt(v, sp):
    if v.is_optimized_out:
        return {"opt": True}
    try:
        a = v.address
        if a is not None and int(a) < sp:
            return {"below_sp": True}
    except gdb.error:
        pass
    t = v.type.strip_typedefs()
    c = t.code
    if c == gdb.TYPE_CODE_PTR:
        tt = t.target().strip_typedefs()
        if tt.code in (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_CHAR) and tt.sizeof == 1:
            try:
                return {"s": cstr(v)}
            except gdb.error:
                return {"fault": True}
        return {"i": str(int(v) & 0xFFFFFFFFFFFFFFFF)}
    if c == gdb.TYPE_CODE_ARRAY:
        et = t.target().strip_typedefs()
        n = t.range()[1] - t.range()[0] + 1
        if et.code in (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_CHAR) and et.sizeof == 1:
            return {"s": cstr(v, n)}
        return {"a": [str(int(v[i])) for i in range(n)]}
    if c == gdb.TYPE_CODE_ENUM:
        return {"e": str(v), "i": str(int(v))}
    if c == gdb.TYPE_CODE_FLT:
        return {"f": repr(float(v)), "fsize": t.sizeof}
    if c in (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_BOOL, gdb.TYPE_CODE_CHAR):
        return {"i": str(int(v))}
    return {"err": "type " + str(t)}


def record(a):
    f = gdb.newest_frame()
    fn = f.function()
    vals = {}
    sp = int(gdb.parse_and_eval("(unsigned long)$sp"))
    for e in req["points"][a]:
        try:
            vals[e] = fmt(gdb.parse_and_eval(e), sp)
        except gdb.error as err:
            vals[e] = {"err": str(err)}
        except (RuntimeError, ValueError, OverflowError) as err:
            vals[e] = {"err": str(err)}
    out[a] = {"func": fn.name if fn else "", "vals": vals}


def trapped():
    """whether the program stopped for a SIGTRAP the kernel sent (an int3)"""
    try:
        si = gdb.parse_and_eval("$_siginfo")
        return int(si["si_signo"]) == 5 and int(si["si_code"]) == 0x80
    except gdb.error:
        return False


def run_int3():
    # PROG has int3 probes at the points: gdb stops at their SIGTRAP with the pc one
    # byte on (the int3 ran, nothing else); the values are read with the pc back at
    # the point, then the pc is put back and the SIGTRAP given to the program, whose
    # probe then records the same state. No breakpoint of gdb's is involved.
    for a, bp in want.values():
        bp.delete()
    pending = {int(a, 16) + base: a for a, bp in want.values()}
    give = False
    for _ in range(MAX_STOPS):
        try:
            gdb.execute("signal SIGTRAP" if give else "continue", to_string=True)
        except gdb.error:
            return
        try:
            pc = gdb.selected_frame().pc()
        except gdb.error:
            return  # the program exited
        give = trapped()
        a = pending.pop(pc - 1, None) if give else None
        if a is not None:
            gdb.execute("set $pc = %#x" % (pc - 1), to_string=True)
            record(a)
            gdb.execute("set $pc = %#x" % pc, to_string=True)


def run_breakpoints():
    stops = 0
    while want and stops < MAX_STOPS:
        stops += 1
        try:
            gdb.execute("continue", to_string=True)
        except gdb.error:
            break
        try:
            pc = gdb.selected_frame().pc()
        except gdb.error:
            break  # the program exited
        hit = [n for n, (a, bp) in want.items() if int(a, 16) + base == pc]
        if not hit:
            continue
        a, bp = want.pop(hit[0])
        bp.delete()
        record(a)


if os.environ.get("GDBVARS_INT3"):
    run_int3()
    json.dump(out, open(os.environ["GDBVARS_OUT"], "w"))
else:
    run_breakpoints()
    json.dump(out, open(os.environ["GDBVARS_OUT"], "w"))
    # let the probes of the last stops run and the program finish its trace
    gdb.execute("delete", to_string=True)
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error:
        pass
