package nemesis

import (
	"net"
	"sync"
)

// relay is the TCP relay under a Link and a LossyPath: each connection
// accepted on one of its listeners is joined to one dial opens, a pump
// per direction copying bytes until either side ends; then both are
// closed. Every connection and goroutine is tracked: close ends them all
// and returns once they are gone.
type relay struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	ls     []net.Listener
	closed bool
	wg     sync.WaitGroup // the accept loops, the pumps and what they start (spawn)
}

func newRelay() *relay { return &relay{conns: map[net.Conn]struct{}{}} }

// serve accepts on l until l is closed (by close). A dial that fails
// refuses the connection, as the destination would; pump(dst, src) copies
// src to dst, and when it returns both connections are closed.
func (r *relay) serve(l net.Listener, dial func() (net.Conn, error), pump func(dst, src net.Conn)) {
	r.mu.Lock()
	r.ls = append(r.ls, l)
	r.mu.Unlock()
	r.spawn(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := dial()
			if err != nil {
				c.Close()
				continue
			}
			if !r.track(c, up) {
				return
			}
			r.spawn(func() { pump(up, c); r.untrack(up, c) })
			r.spawn(func() { pump(c, up); r.untrack(c, up) })
		}
	})
}

// spawn runs f in a goroutine close waits for.
func (r *relay) spawn(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

func (r *relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
		c.Close()
	}
}

// close closes every connection and listener and waits for every
// goroutine of the relay. Idempotent.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	ls := r.ls
	r.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	r.wg.Wait()
}
