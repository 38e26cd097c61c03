# bound-rounds.awk - the rounds of bench-floor.sh and bench-python-floor.sh against one
# of issue 49's bounds, round by round: a line a round, "base value" (CPU ns: base the
# round's floor, or for a direct run its round's `record` cost); prints one line with
# each round's ratio and how many of the rounds are at or under the bound (-v bound=B,
# -v what=TEXT). A median over 3-5 rounds of a host whose rate flips within seconds can
# land either side of a bound; this says how many rounds did.
{
	r = $2 / $1
	list = list sprintf("%s%.2f", NR > 1 ? " " : "", r)
	if (r <= bound) under++
}
END { printf "%s at most %.2fx: %d of %d rounds (%s)\n", what, bound, under, NR, list }
