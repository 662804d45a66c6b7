package apiserver

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"sync"
	"time"
)

// certCache remembers client certificate chains already verified against
// the server's client CAs. A client sends the same chain with every
// request of a connection (client-go keeps one HTTP/2 connection), and
// checking its signatures was a sixth of the api process's CPU in a run of
// pod creates. An entry is the exact chain presented (a digest of every
// certificate's bytes, in order) and is trusted until the earliest
// NotAfter of the chain it verified to; the client CAs never change for a
// server. Only successes are kept, at most max; when full, an arbitrary
// tenth is dropped.
type certCache struct {
	max int
	mu  sync.Mutex
	m   map[[sha256.Size]byte]time.Time // chain digest → valid until
}

// certCacheSize bounds the verified chains remembered: one per client.
const certCacheSize = 4096

func newCertCache(max int) *certCache {
	return &certCache{max: max, m: make(map[[sha256.Size]byte]time.Time)}
}

// chainDigest names a presented chain: every certificate, length-prefixed.
func chainDigest(certs []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, c := range certs {
		binary.BigEndian.PutUint64(n[:], uint64(len(c.Raw)))
		h.Write(n[:])
		h.Write(c.Raw)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// verified reports whether the chain was verified and is still valid at now.
func (c *certCache) verified(d [sha256.Size]byte, now time.Time) bool {
	c.mu.Lock()
	until, ok := c.m[d]
	if ok && !now.Before(until) {
		delete(c.m, d)
		ok = false
	}
	c.mu.Unlock()
	return ok
}

// add records a chain that verified to chain (leaf first, root last).
func (c *certCache) add(d [sha256.Size]byte, chain []*x509.Certificate) {
	if len(chain) == 0 {
		return
	}
	until := chain[0].NotAfter
	for _, x := range chain[1:] {
		if x.NotAfter.Before(until) {
			until = x.NotAfter
		}
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			if len(c.m) < c.max*9/10 {
				break
			}
		}
	}
	c.m[d] = until
	c.mu.Unlock()
}
