# gdb script of TestGoArgsMatchGDB: runs a Go program to breakpoints at the given
# addresses and prints, at every hit, the values of the given paths as kprewrite's
# trace prints them ("EVENT: name=value ..."), one line a hit, into GOGDB_OUT.
# GOGDB_REQ is JSON: {"ADDR": [["EVENT", [[field, path, kind], ...]], ...], ...}; a path is
# VAR(.FIELD)* (through pointers as Go does); kind is "val" (an int, bool, float or
# string), "len" (a slice's length), "elems" (a slice's first 4 elements, 0 past its length), "atN" (its
# element N), "dyn" (an interface's dynamic type, named by the itab's symbol; nil
# for nil), "errmsg" (an error's message, read through gdb's types as its Error
# method builds it, for the types kprewrite reads; else as "dyn") or "maplen" (a
# map's length).
import json
import os

import gdb

req = json.load(open(os.environ["GOGDB_REQ"]))
out = open(os.environ["GOGDB_OUT"], "w")
gdb.execute("set pagination off")
gdb.execute("set confirm off")
for addr in req:
    gdb.execute("break *" + addr, to_string=True)


def walk(frame, path):
    parts = path.split(".")
    try:
        v = frame.read_var(parts[0])
    except ValueError:  # &x: x moved to the heap, DWARF gives its address
        v = frame.read_var("&" + parts[0]).dereference()
    for p in parts[1:]:
        if v.type.strip_typedefs().code == gdb.TYPE_CODE_PTR:
            v = v.dereference()
        v = v[p]
    return v


def is_string(t):
    t = t.strip_typedefs()
    return t.code == gdb.TYPE_CODE_STRUCT and [f.name for f in t.fields()] == ["str", "len"]


def val(v):
    t = v.type.strip_typedefs()
    if is_string(v.type):
        n = int(v["len"])
        if n == 0:
            return '""'
        b = gdb.selected_inferior().read_memory(int(v["str"]), n)
        return '"' + bytes(b).decode("latin-1") + '"'
    if t.code == gdb.TYPE_CODE_BOOL:
        return "1" if bool(v) else "0"
    if t.code == gdb.TYPE_CODE_FLT:
        f = float(v)
        return str(int(f)) if f == int(f) else repr(f)
    return str(int(v))


def dyn(v):
    tab = int(v["tab"])
    if tab == 0:
        return "nil"
    sym = gdb.execute("info symbol %#x" % tab, to_string=True).split()[0]
    return sym[len("go:itab."):].split(",")[0]


def gostr(v):
    n = int(v["len"])
    if n == 0:
        return ""
    return bytes(gdb.selected_inferior().read_memory(int(v["str"]), n)).decode("latin-1")


def at(data, typ):
    return gdb.Value(data).cast(gdb.lookup_type(typ).pointer()).dereference()


def errtext(name, data):
    """the message of the error (name, data), None where kprewrite reads none"""
    if name == "*errors.errorString":
        return gostr(at(data, "errors.errorString")["s"])
    if name in ("*fmt.wrapError", "*fmt.wrapErrors", "*encoding/json.SyntaxError"):
        return gostr(at(data, name[1:])["msg"])
    if name == "runtime.plainError":  # type plainError string: its header at data
        hdr = bytes(gdb.selected_inferior().read_memory(data, 16))
        ptr, n = int.from_bytes(hdr[:8], "little"), int.from_bytes(hdr[8:], "little")
        return bytes(gdb.selected_inferior().read_memory(ptr, n)).decode("latin-1") if n else ""
    if name == "*io/fs.PathError":
        p = at(data, "io/fs.PathError")
        err = p["Err"]
        if int(err["tab"]) == 0:
            return None
        inner = errtext(dyn(err), int(err["data"]))
        if inner is None:
            return None
        return gostr(p["Op"]) + " " + gostr(p["Path"]) + ": " + inner
    if name == "*os.SyscallError":
        p = at(data, "os.SyscallError")
        err = p["Err"]
        inner = errtext(dyn(err), int(err["data"])) if int(err["tab"]) else None
        return None if inner is None else gostr(p["Syscall"]) + ": " + inner
    if name == "syscall.Errno":
        n = int(at(data, "uintptr"))
        table = gdb.parse_and_eval("'syscall.errors'")
        if n < table.type.range()[1] + 1 and int(table[n]["len"]) > 0:
            return gostr(table[n])
        return "errno %d" % n
    return None


def errmsg(v):
    if int(v["tab"]) == 0:
        return "nil"
    name = dyn(v)
    text = errtext(name, int(v["data"]))
    return name if text is None else '"' + text + '"'


def show(frame, field, path, kind):
    v = walk(frame, path)
    if kind == "len":
        return str(int(v["len"]))
    if kind == "elems":
        n = int(v["len"])
        return "{" + ",".join(str(int(v["array"][i])) if i < n else "0" for i in range(4)) + "}"
    if kind == "dyn":
        return dyn(v)
    if kind == "errmsg":
        return errmsg(v)
    if kind == "maplen":  # a map: a pointer to its header, whose first word counts
        if int(v) == 0:
            return "0"
        h = v.dereference()
        return str(int(h[h.type.strip_typedefs().fields()[0].name]))
    if kind.startswith("at"):
        return str(int(v["array"][int(kind[2:])]))
    return val(v)


gdb.execute("run > /dev/null", to_string=True)
while True:
    try:
        frame = gdb.selected_frame()
    except gdb.error:
        break
    key = "%#x" % frame.pc()
    for event, fields in req.get(key, []):
        out.write(event + ": " + " ".join(f + "=" + show(frame, f, p, k) for f, p, k in fields) + "\n")
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error:
        break
out.close()
