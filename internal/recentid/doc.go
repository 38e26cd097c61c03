// Package recentid caches what is looked up per trace record by (image id, event id):
// records mostly come from one image and its events have small ids, so a slice of the
// last image's entries answers without the map lookup that was a quarter of an
// export's time.
package recentid
