#!/bin/sh
# Fetches the SQLite amalgamation (sqlite3.c) that TestSourceProbeSQLite builds with
# -g, from the npm registry's better-sqlite3 package (pinned: line numbers in the
# test depend on it), into DIR (default $HOME/.cache/kprewrite/sqlite), and prints
# the path of sqlite3.c. The test reads it from KPREWRITE_SQLITE_AMALGAMATION.
set -eu
version=13.2.0
dir=${1:-${HOME:-/tmp}/.cache/kprewrite/sqlite}/better-sqlite3-$version
if [ ! -f "$dir/package/deps/sqlite3/sqlite3.c" ]; then
	mkdir -p "$dir"
	(cd "$dir" && npm pack --silent "better-sqlite3@$version" >/dev/null 2>&1 && tar xzf "better-sqlite3-$version.tgz" package/deps/sqlite3)
fi
echo "$dir/package/deps/sqlite3/sqlite3.c"
