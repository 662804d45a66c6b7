package bus_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
)

// TestSubscribedRegistersBeforeReturning: right after Subscribed returns,
// the server holds the subscription (a request from any connection finds
// it), for each of 40 subscriptions; one it cannot confirm is removed.
func TestSubscribedRegistersBeforeReturning(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "svc")
	nc := conn.NATS()
	for i := range 40 {
		subj := "podflow.test.subscribed." + string(rune('a'+i%26))
		sub, err := nc.Subscribe(subj, func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Subscribed(context.Background(), nc, sub); err != nil {
			t.Fatal(err)
		}
		sz, err := srv.Server().Subsz(&server.SubszOptions{Subscriptions: true, Test: subj})
		if err != nil {
			t.Fatal(err)
		}
		if sz.Total != 1 {
			t.Errorf("%d: right after Subscribed(%q) the server holds %d subscriptions on it, want 1", i, subj, sz.Total)
		}
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// A connection that cannot reach the server is not registered: an
	// error, and the subscription is gone.
	sub, err := nc.Subscribe("podflow.test.subscribed.closed", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := bus.Subscribed(ctx, nc, sub); err == nil {
		t.Fatal("Subscribed with a cancelled context: no error")
	}
	if sub.IsValid() {
		t.Error("the subscription of a failed Subscribed is still valid")
	}
}

// TestSubscribedWaitsThroughADisconnect: the connection drops while
// Subscribed waits for the server's answer (nats.go then fails the flush
// at once); Subscribed waits for the reconnect, after which the server
// holds the subscription, instead of failing the process that serves.
func TestSubscribedWaitsThroughADisconnect(t *testing.T) {
	srv := bustest.Server(t)
	target := srv.ClientURL()
	// A relay the test can stall and cut: client -> relay -> server.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	var stalled bool
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, _ := url.Parse(target)
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						dst.Close()
						return
					}
					mu.Lock()
					st := stalled
					mu.Unlock()
					if st && src == c {
						continue // the client's bytes are lost while stalled
					}
					if _, err := dst.Write(buf[:n]); err != nil {
						src.Close()
						return
					}
				}
			}
			go pipe(s, c)
			go pipe(c, s)
		}
	}()
	cfg, err := srv.ClientConfigAs(bus.RoleAdmin, "subscribed")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+l.Addr().String(), nats.UserInfo(cfg.User, cfg.Password),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	mu.Lock()
	stalled = true
	mu.Unlock()
	sub, err := nc.Subscribe("podflow.test.subscribed.cut", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- bus.Subscribed(ctx, nc, sub) }()
	time.Sleep(300 * time.Millisecond) // the flush waits on the stalled relay
	mu.Lock()
	stalled = false
	for _, c := range conns {
		c.Close() // the disconnect
	}
	mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("Subscribed across a disconnect: %v", err)
	}
	sz, err := srv.Server().Subsz(&server.SubszOptions{Subscriptions: true, Test: "podflow.test.subscribed.cut"})
	if err != nil {
		t.Fatal(err)
	}
	if sz.Total != 1 {
		t.Fatalf("after the reconnect the server holds %d subscriptions, want 1", sz.Total)
	}
}

// TestSubscribedWaitsForTheServer: a connection that has not reached its
// server yet (it retries) is not an error: Subscribed returns once the
// server is up and holds the subscription.
func TestSubscribedWaitsForTheServer(t *testing.T) {
	// The port is held by a socket bound and not listening until the
	// server starts: connects to it are refused, as with no server, and
	// no other socket can take it meanwhile — a port freed for the wait
	// is an ephemeral one, which an outgoing connection (the client's own
	// retries among them: a TCP self-connect) could be given.
	port, release := reservePort(t)
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("podflow.test.subscribed.later", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- bus.Subscribed(ctx, nc, sub) }()
	select {
	case err := <-done:
		t.Fatalf("Subscribed returned %v with no server to register at", err)
	case <-time.After(500 * time.Millisecond):
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	release()
	go srv.Start()
	defer srv.Shutdown()
	if err := <-done; err != nil {
		t.Fatalf("Subscribed once the server is up: %v", err)
	}
	sz, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: "podflow.test.subscribed.later"})
	if err != nil {
		t.Fatal(err)
	}
	if sz.Total != 1 {
		t.Fatalf("the server holds %d subscriptions, want 1", sz.Total)
	}
}
