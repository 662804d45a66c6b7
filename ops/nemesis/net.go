package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"time"
)

// ErrClosed is returned by a Net that was closed.
var ErrClosed = errors.New("nemesis: network closed")

// Net is the fault-injecting network between a set of nodes: one Link per
// directed pair, each a loopback relay to the destination's real address.
// A node dials its peers at DialAddrs(node) (raftstore.Config.PeerAddrs).
// Apply sets a Fault on every link at once; Heal clears it. Safe for
// concurrent use; Close stops every relay.
type Net struct {
	mu     sync.Mutex
	links  map[Edge]*Link
	path   Path
	fault  Fault
	closed bool
}

// Path carries a Net's relayed connections to their real addresses
// (LossyPath: through the kernel, losing packets); without one the relays
// dial the addresses directly.
type Path interface {
	Dial(target string, timeout time.Duration) (net.Conn, error)
	SetLoss(percent int) error
}

// Edge is a directed link: traffic that From sends to To (and To's
// answers on those connections).
type Edge struct{ From, To string }

func (e Edge) String() string { return e.From + "→" + e.To }

// New starts a relay for every directed pair of targets (node → the
// address it listens on), each on a fresh loopback port.
func New(targets map[string]string) (*Net, error) { return NewVia(targets, nil) }

// NewVia is New with every relay's connection to its destination
// opened over path (nil: directly), so that Lose faults apply.
func NewVia(targets map[string]string, path Path) (*Net, error) {
	n := &Net{links: map[Edge]*Link{}, path: path}
	for from := range targets {
		for to, addr := range targets {
			if from == to {
				continue
			}
			l, err := newLink(Edge{from, to}, addr, path)
			if err != nil {
				n.Close()
				return nil, err
			}
			n.links[Edge{from, to}] = l
		}
	}
	return n, nil
}

// DialAddrs is where from dials each of its peers.
func (n *Net) DialAddrs(from string) map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]string{}
	for e, l := range n.links {
		if e.From == from {
			out[e.To] = l.Addr()
		}
	}
	return out
}

// Nodes are the nodes of the network, sorted.
func (n *Net) Nodes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	seen := map[string]bool{}
	for e := range n.links {
		seen[e.From] = true
	}
	var out []string
	for id := range seen {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Apply makes f the network's whole state: the links it cuts stop
// carrying bytes (connections stay open, their data waits, as TCP's
// would during a partition), every other link is healed; every link
// delivers with f's delay and jitter.
func (n *Net) Apply(f Fault) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	for e := range f.Cut {
		if _, ok := n.links[e]; !ok {
			return fmt.Errorf("nemesis: no link %s", e)
		}
	}
	if f.Loss != n.fault.Loss {
		if n.path == nil {
			return errors.New("nemesis: packet loss needs a Net over a lossy path (NewVia)")
		}
		if err := n.path.SetLoss(f.Loss); err != nil {
			return err
		}
	}
	n.fault = f
	for e, l := range n.links {
		l.set(f.Cut[e], f.Delay, f.Jitter)
	}
	return nil
}

// Heal clears every fault.
func (n *Net) Heal() error { return n.Apply(Fault{}) }

// Fault is the current fault.
func (n *Net) Fault() Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fault
}

// Flap alternates f and a healed network every period until ctx is done
// or d has passed, then heals. It returns the number of times f was
// applied.
func (n *Net) Flap(ctx context.Context, f Fault, period, d time.Duration) (int, error) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	flaps, on := 0, false
	for {
		var err error
		if on = !on; on {
			err = n.Apply(f)
			flaps++
		} else {
			err = n.Heal()
		}
		if err != nil {
			return flaps, err
		}
		select {
		case <-ctx.Done():
			return flaps, errors.Join(ctx.Err(), n.Heal())
		case <-end.C:
			return flaps, n.Heal()
		case <-tick.C:
		}
	}
}

// Close stops every relay and closes their connections. Idempotent.
func (n *Net) Close() {
	n.mu.Lock()
	n.closed = true
	links := n.links
	n.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Stats are the bytes each link relayed, by edge.
func (n *Net) Stats() map[Edge]int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[Edge]int64{}
	for e, l := range n.links {
		l.mu.Lock()
		out[e] = l.bytes
		l.mu.Unlock()
	}
	return out
}

// Link is one directed relay. While cut, its pumps hold the bytes they
// read (so senders fill their socket buffers and time out, as across a
// partition) and deliver them when healed; with a delay each chunk is
// delivered no earlier than delay (plus up to jitter) after it was read,
// in order.
type Link struct {
	edge   Edge
	l      net.Listener
	target string // the destination's real address
	r      *relay // accepts on l, dials target (over path)

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change of state
	cut     bool
	delay   time.Duration
	jitter  time.Duration
	bytes   int64
	closed  bool
	rng     *rand.Rand
}

func newLink(e Edge, target string, path Path) (*Link, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("nemesis: listen for %s: %w", e, err)
	}
	k := &Link{edge: e, l: l, target: target, r: newRelay(), changed: make(chan struct{}),
		rng: rand.New(rand.NewPCG(uint64(l.Addr().(*net.TCPAddr).Port), 1))}
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", target, 2*time.Second) }
	if path != nil {
		dial = func() (net.Conn, error) { return path.Dial(target, 2*time.Second) }
	}
	k.r.serve(l, dial, k.pump)
	return k, nil
}

// Addr is the relay's loopback address.
func (k *Link) Addr() string { return k.l.Addr().String() }

func (k *Link) set(cut bool, delay, jitter time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cut == cut && k.delay == delay && k.jitter == jitter {
		return
	}
	k.cut, k.delay, k.jitter = cut, delay, jitter
	close(k.changed)
	k.changed = make(chan struct{})
}

type chunk struct {
	b   []byte
	due time.Time
}

// pump relays src to dst through a queue: a reader stamps each chunk with
// the time it may be delivered, a writer delivers it once due and the
// link is not cut. Either side's end ends it (the relay then closes both
// connections).
func (k *Link) pump(dst, src net.Conn) {
	q := make(chan chunk, 64)
	done := make(chan struct{})
	k.r.spawn(func() {
		defer close(q)
		var last time.Time
		for {
			b := make([]byte, 32<<10)
			m, err := src.Read(b)
			if m > 0 {
				select {
				case q <- chunk{b[:m], k.due(&last)}:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	defer close(done)
	for c := range q {
		if !k.wait(c.due) {
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
		k.mu.Lock()
		k.bytes += int64(len(c.b))
		k.mu.Unlock()
	}
}

// due is when a chunk read now may be delivered: never before the
// stream's previous chunk, last (a TCP stream stays in order).
func (k *Link) due(last *time.Time) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.delay
	if k.jitter > 0 {
		d += time.Duration(k.rng.Int64N(int64(k.jitter)))
	}
	t := time.Now().Add(d)
	if t.Before(*last) {
		t = *last
	}
	*last = t
	return t
}

// wait blocks until due has passed and the link is not cut; false once
// the link is closed.
func (k *Link) wait(due time.Time) bool {
	for {
		k.mu.Lock()
		cut, closed, changed := k.cut, k.closed, k.changed
		k.mu.Unlock()
		if closed {
			return false
		}
		if !cut {
			wait := time.Until(due)
			if wait <= 0 {
				return true
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				return true
			case <-changed:
				t.Stop()
			}
			continue
		}
		<-changed
	}
}

func (k *Link) close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	close(k.changed)
	k.changed = make(chan struct{})
	k.mu.Unlock()
	k.r.close()
}
