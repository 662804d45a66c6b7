package bus_test

import (
	"sync"
	"syscall"
	"testing"
)

// reservePorts reserves n ports of 127.0.0.1 for servers that start
// later (reservePort): each is released right before its server binds
// it. A port found free by listening on :0 and closing is an ephemeral
// one, free for anyone until the server binds it: an outgoing
// connection could be given it, and a route dialling a peer's port
// before that peer listens could connect to itself.
func reservePorts(t *testing.T, n int) ([]int, []func()) {
	t.Helper()
	ports, release := make([]int, n), make([]func(), n)
	for i := range n {
		ports[i], release[i] = reservePort(t)
	}
	return ports, release
}

// reservePort binds a TCP socket to a free port of 127.0.0.1 without
// listening on it, and returns the port and what closes the socket
// (idempotent; also at t's cleanup).
func reservePort(t *testing.T) (int, func()) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = syscall.Close(fd) }) }
	t.Cleanup(release)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port, release
}
