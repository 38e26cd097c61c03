// Package recentid is the per-record lookup cache, by (image id, event id), that the
// trace readers share.
//
// Records mostly come from one image and its events have small ids, so a slice of
// the last image's entries answers without the map lookup that was a quarter of an
// export's time.
package recentid
