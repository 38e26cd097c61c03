# split-rounds.awk - the rounds of bench-floor.sh and bench-python-floor.sh split by the
# host's rate in each (issue 49): a line a round, "floor checks value [second]" (CPU ns;
# checks: the probe floor and 120 predicted instructions, b.c's pchecks_work); quick
# where checks is at most 1.2x the round's floor, slow above. Prints a Markdown row for
# each kind: its rounds, value's median and that over the floor's median, and with a
# second column its median and that over value's.
function med(a, n,   i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return a[int((n + 1) / 2)]
}
function row(label, k,   n, i, f, v, s, fm, vm, sm) {
	n = N[k]
	if (n == 0) {
		printf "| %s | 0 | | |%s\n", label, two ? " | |" : ""
		return
	}
	for (i = 1; i <= n; i++) { f[i] = F[k, i]; v[i] = V[k, i]; s[i] = S[k, i] }
	fm = med(f, n); vm = med(v, n)
	printf "| %s | %d | %.2f | %.2f |", label, n, vm, vm / fm
	if (two) { sm = med(s, n); printf " %.2f | %.2f |", sm, sm / vm }
	printf "\n"
}
{
	k = $2 <= 1.2 * $1 ? "q" : "s"
	i = ++N[k]
	F[k, i] = $1; V[k, i] = $3; S[k, i] = $4
	if (NF >= 4) two = 1
}
END { row("quick (at most 1.2x)", "q"); row("slow (above 1.2x)", "s") }
