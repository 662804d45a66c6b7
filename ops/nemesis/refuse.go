package nemesis

import (
	"fmt"
	"net"
	"syscall"
)

// Refusing is a loopback address that refuses every connection for as
// long as it is open: a TCP socket bound to a fresh port that never
// listens, so that no other process can take the port meanwhile. The NATS
// servers of chaos advertise it as their route address, so that a server
// that learns of a peer by gossip fails to dial it instead of going
// around the relays.
type Refusing struct{ fd int }

// NewRefusing binds the socket.
func NewRefusing() (*Refusing, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("nemesis: refusing socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("nemesis: bind the refusing socket: %w", err)
	}
	return &Refusing{fd: fd}, nil
}

// Addr is the address that refuses.
func (r *Refusing) Addr() string {
	sa, err := syscall.Getsockname(r.fd)
	if err != nil {
		return ""
	}
	a := sa.(*syscall.SockaddrInet4)
	return (&net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}).String()
}

// Close releases the port.
func (r *Refusing) Close() error { return syscall.Close(r.fd) }
