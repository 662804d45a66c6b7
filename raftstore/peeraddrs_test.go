package raftstore_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// forwarder is a loopback TCP relay to target that counts its connections.
type forwarder struct {
	l     net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  []net.Conn
}

func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{l: l}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.conns.Add(1)
			f.mu.Lock()
			f.open = append(f.open, c, up)
			f.mu.Unlock()
			for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
				f.wg.Add(1)
				go func() {
					defer f.wg.Done()
					_, _ = io.Copy(pair[0], pair[1])
					pair[0].Close()
					pair[1].Close()
				}()
			}
		}
	}()
	return f
}

func (f *forwarder) close() {
	f.l.Close()
	f.mu.Lock()
	for _, c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// TestPeerAddrsRouteEachLink: with Config.PeerAddrs every replica dials
// each peer through its own relay (one per directed link), so the
// leader's replication to each follower crosses the relay of that link.
func TestPeerAddrsRouteEachLink(t *testing.T) {
	links := map[[2]string]*forwarder{}
	var mu sync.Mutex
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) {
		cfg.PeerAddrs = map[string]string{}
		for _, p := range cfg.Bootstrap {
			if p.ID == cfg.ID {
				continue
			}
			f := newForwarder(t, p.Address)
			mu.Lock()
			links[[2]string{cfg.ID, p.ID}] = f
			mu.Unlock()
			cfg.PeerAddrs[p.ID] = f.l.Addr().String()
		}
	})
	// Relays close after the cluster (cleanups run last-in first-out).
	t.Cleanup(func() {
		c.Shutdown()
		for _, f := range links {
			f.close()
		}
	})
	ctx := testCtx(t)
	cl := c.Client(t)
	if _, err := cl.Create(ctx, "/peer/a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	c.WaitForReplication(t)
	leader := c.Node(c.Leader(t)).ID()
	for link, f := range links {
		if link[0] == leader && f.conns.Load() == 0 {
			t.Errorf("leader %s reached %s without its relay", link[0], link[1])
		}
	}
}
