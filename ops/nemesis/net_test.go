package nemesis

import (
	"bufio"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// echoServer answers every line with the same line, until t ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func newNet(t *testing.T) (*Net, map[string]string) {
	t.Helper()
	targets := map[string]string{"a": echoServer(t), "b": echoServer(t), "c": echoServer(t)}
	n, err := New(targets)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n, targets
}

type peerConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, n *Net, from, to string) *peerConn {
	t.Helper()
	c, err := net.Dial("tcp", n.DialAddrs(from)[to])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &peerConn{c, bufio.NewReader(c)}
}

// roundTrip sends a line and reads the echo, giving up after limit.
func (c *peerConn) roundTrip(line string, limit time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(limit))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func mustEcho(t *testing.T, c *peerConn, line string) {
	t.Helper()
	got, err := c.roundTrip(line, 10*time.Second)
	if err != nil || got != line {
		t.Fatalf("echo %q = %q, %v", line, got, err)
	}
}

// mustBeCut: nothing comes back within a while. A working link answers
// on loopback in microseconds; a cut one never does.
func mustBeCut(t *testing.T, c *peerConn, line string) {
	t.Helper()
	got, err := c.roundTrip(line, 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("over a cut link %q came back as %q, %v", line, got, err)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRelayCutHeal(t *testing.T) {
	n, _ := newNet(t)
	ab := dial(t, n, "a", "b")
	mustEcho(t, ab, "one")

	if err := n.Apply(Isolate(n.Nodes(), "a")); err != nil {
		t.Fatal(err)
	}
	mustBeCut(t, ab, "two")
	// A connection made during the cut is accepted, but carries nothing.
	ac := dial(t, n, "a", "c")
	mustBeCut(t, ac, "three")
	// The others still talk.
	mustEcho(t, dial(t, n, "b", "c"), "four")

	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	// What was sent during the cut arrives after it, in order, as TCP's
	// retransmissions would.
	_ = ab.SetDeadline(time.Now().Add(10 * time.Second))
	if got, err := ab.r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
	_ = ac.SetDeadline(time.Now().Add(10 * time.Second))
	if got, err := ac.r.ReadString('\n'); err != nil || got != "three\n" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
	mustEcho(t, ab, "five")
}

func TestOneWay(t *testing.T) {
	n, _ := newNet(t)
	ab, ba := dial(t, n, "a", "b"), dial(t, n, "b", "a")
	if err := n.Apply(OneWay("a", "b")); err != nil {
		t.Fatal(err)
	}
	mustBeCut(t, ab, "lost")
	mustEcho(t, ba, "kept")
}

func TestDelay(t *testing.T) {
	n, _ := newNet(t)
	ab := dial(t, n, "a", "b")
	const d = 150 * time.Millisecond
	if err := n.Apply(Slow(d, 20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mustEcho(t, ab, "slow")
	// Two directions, each at least d: a lower bound, not a speed limit.
	if el := time.Since(start); el < 2*d {
		t.Fatalf("round trip took %s, want at least %s", el, 2*d)
	}
}

func TestFlapEndsHealed(t *testing.T) {
	n, _ := newNet(t)
	flaps, err := n.Flap(t.Context(), Isolate(n.Nodes(), "b"), 20*time.Millisecond, 200*time.Millisecond)
	if err != nil || flaps < 2 {
		t.Fatalf("Flap = %d, %v", flaps, err)
	}
	if f := n.Fault(); len(f.Cut) != 0 {
		t.Fatalf("after flapping the network is %s", f)
	}
	mustEcho(t, dial(t, n, "a", "b"), "healed")
}

func TestApplyUnknownLink(t *testing.T) {
	n, _ := newNet(t)
	if err := n.Apply(OneWay("a", "zz")); err == nil {
		t.Fatal("a fault on an unknown link was applied")
	}
	n.Close()
	if err := n.Heal(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Heal after Close = %v", err)
	}
}

func TestFaults(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name string
		f    Fault
		cut  []Edge
	}{
		{"isolate", Isolate(nodes, "a"), []Edge{{"a", "b"}, {"a", "c"}, {"b", "a"}, {"c", "a"}}},
		{"partition", Partition(nodes, []string{"a", "b"}, []string{"c"}), []Edge{{"a", "c"}, {"b", "c"}, {"c", "a"}, {"c", "b"}}},
		{"bridge", Bridge(nodes, "b", []string{"a"}, []string{"c"}), []Edge{{"a", "c"}, {"c", "a"}}},
		{"one-way", OneWay("a", "b"), []Edge{{"a", "b"}}},
		{"slow", Slow(time.Millisecond, 0), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.f.CutLinks()
			if len(got) != len(tc.cut) {
				t.Fatalf("%s cuts %v, want %v", tc.f, got, tc.cut)
			}
			for i := range got {
				if got[i] != tc.cut[i] {
					t.Fatalf("%s cuts %v, want %v", tc.f, got, tc.cut)
				}
			}
		})
	}
}
