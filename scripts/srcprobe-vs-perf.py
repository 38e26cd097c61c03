#!/usr/bin/env python3
"""Compares how many (probe point, variable) pairs kprewrite and perf probe resolve
on tests/testdata/srcvars.c built with -g at -O0..-O3: for every line of its
functions that has code (kprewrite check --lines) and every variable visible
there (kprewrite check --vars), whether `kprewrite check --vars` gives a fetch at
every address of the line, and whether `perf probe -x BIN -n 'FUNC:RLN VAR'`
accepts it (dry run: it writes the definition it would add, adds nothing).

Usage: scripts/srcprobe-vs-perf.py [KPREWRITE]  (default: go run ./cmd/kprewrite)
Prints a Markdown table (docs/source-probes.md has the figures)."""
import json
import os
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
kp = sys.argv[1] if len(sys.argv) > 1 else None
if kp is None:
    kp = os.path.join(tempfile.mkdtemp(), "kprewrite")
    subprocess.run(["go", "build", "-o", kp, "./cmd/kprewrite"], cwd=root, check=True)
funcs = ["handle", "sum_hist", "describe", "walk", "weigh", "main"]
rows = []
for opt in ["-O0", "-O1", "-O2", "-O3"]:
    d = tempfile.mkdtemp()
    src = os.path.join(d, "srcvars.c")
    with open(os.path.join(root, "tests/testdata/srcvars.c")) as f, open(src, "w") as g:
        g.write(f.read())
    bin_ = os.path.join(d, "srcvars")
    subprocess.run(["gcc", "-g", opt, "-o", bin_, src], check=True)
    pairs = kp_ok = perf_ok = both = perf_agg = 0
    for fn in funcs:
        lines = json.loads(subprocess.run([kp, "check", "--json", "--lines", fn, bin_], capture_output=True, check=True).stdout)
        rels = sorted({l["Rel"] for fl in lines if not fl["Inlined"] for l in fl["Lines"]})
        for rel in rels:
            point = "%s:%d" % (fn, rel)
            r = subprocess.run([kp, "check", "--json", "--vars", point, bin_], capture_output=True)
            if r.returncode != 0:
                continue
            pvs = json.loads(r.stdout)
            names, types = [], {}
            for pv in pvs:
                for v in pv["Vars"] or []:
                    if not v["Global"] and v["Name"] not in names:
                        names.append(v["Name"])
                        types[v["Name"]] = v["Type"]
            for name in names:
                ok = all(any(v["Name"] == name and v["Fetch"] for v in pv["Vars"] or []) for pv in pvs)
                p = subprocess.run(["perf", "probe", "-x", bin_, "-n", "%s %s" % (point, name)], capture_output=True)
                pairs += 1
                kp_ok += ok
                perf_ok += p.returncode == 0
                both += ok and p.returncode == 0
                # perf reads a struct or union variable as its first 8 bytes (x64)
                perf_agg += p.returncode == 0 and types[name].split(" ")[0] in ("struct", "union")
    rows.append((opt, pairs, kp_ok, perf_ok, perf_agg, both))
print("| build | (line, variable) pairs | kprewrite resolves | perf probe resolves | of which a struct read as one word | both |")
print("|---|---|---|---|---|---|")
for r in rows:
    print("| gcc %s -g | %d | %d | %d | %d | %d |" % r)
