package recentid

// maxID bounds the ids kept in the slice; larger ones are looked up every time.
const maxID = 1 << 16

// Cache holds, for the image seen last, the value of each event id looked up so far
// (nil values included).
type Cache[T any] struct {
	image uint64
	ok    bool
	byID  []slot[T]
}

type slot[T any] struct {
	v   *T
	set bool
}

// Get returns the value of (image, id), calling lookup only when the cache does not
// hold it.
func (c *Cache[T]) Get(image uint64, id uint32, lookup func(image uint64, id uint32) *T) *T {
	if c.ok && c.image == image && uint64(id) < uint64(len(c.byID)) && c.byID[id].set {
		return c.byID[id].v
	}
	v := lookup(image, id)
	if id < maxID {
		if !c.ok || c.image != image {
			c.ok, c.image, c.byID = true, image, c.byID[:0]
		}
		for uint64(len(c.byID)) <= uint64(id) {
			c.byID = append(c.byID, slot[T]{})
		}
		c.byID[id] = slot[T]{v: v, set: true}
	}
	return v
}
