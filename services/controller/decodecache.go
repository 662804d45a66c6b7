package controller

import "sync"

// DecodeCache keeps the last decoding of each object and the store
// revision it was decoded at, so that a controller decodes a revision of
// an object once however often its informers hand it over. The values are
// shared: a caller copies one before it changes it. It is safe for
// concurrent use; the zero DecodeCache is empty and ready.
type DecodeCache[T any] struct {
	mu sync.Mutex
	m  map[string]decodedAt[T]
}

type decodedAt[T any] struct {
	rev int64
	obj T
}

// Decode returns the value kept for key at revision rev, else what decode
// returns, kept for rev when decode succeeds. A failed decoding is not
// kept (decode runs again for the same revision), and a value decoded
// from an older revision than the one kept does not replace it.
func (c *DecodeCache[T]) Decode(key string, rev int64, decode func() (T, error)) (T, error) {
	c.mu.Lock()
	d, ok := c.m[key]
	c.mu.Unlock()
	if ok && d.rev == rev {
		return d.obj, nil
	}
	obj, err := decode()
	if err != nil {
		var zero T
		return zero, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.m[key]; !ok || d.rev <= rev {
		if c.m == nil {
			c.m = map[string]decodedAt[T]{}
		}
		c.m[key] = decodedAt[T]{rev: rev, obj: obj}
	}
	return obj, nil
}

// Forget drops what is kept for key (its object is gone).
func (c *DecodeCache[T]) Forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

// Len is the number of objects kept.
func (c *DecodeCache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
