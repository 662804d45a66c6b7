package dns

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestPairOnPortTakenOverTCP: the kernel's UDP pick for port 0 may be a
// port another socket holds over TCP (seen in make test: "bind: address
// already in use"). The first pick here is such a port; Start's pair is
// then made on another, both protocols on the same port. A named port
// taken over TCP is an error at once.
func TestPairOnPortTakenOverTCP(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenAddr := taken.Addr().String()
	picks := 0
	udp := func() (net.PacketConn, error) {
		picks++
		if picks == 1 {
			return net.ListenPacket("udp", takenAddr) // free over UDP, taken over TCP
		}
		return net.ListenPacket("udp", "127.0.0.1:0")
	}
	tcp := func(a string) (net.Listener, error) { return net.Listen("tcp", a) }

	pc, l, err := pairOn(true, udp, tcp)
	if err != nil {
		t.Fatalf("pairOn(any port) = %v, want a pair on another port", err)
	}
	defer pc.Close()
	defer l.Close()
	if picks != 2 || pc.LocalAddr().String() != l.Addr().String() || l.Addr().String() == takenAddr {
		t.Fatalf("after %d picks: udp %s, tcp %s (taken %s): want the second pick, one port for both", picks, pc.LocalAddr(), l.Addr(), takenAddr)
	}

	picks = 0
	if _, _, err := pairOn(false, udp, tcp); !errors.Is(err, syscall.EADDRINUSE) || picks != 1 {
		t.Fatalf("pairOn(named port) = %v after %d picks, want EADDRINUSE after one", err, picks)
	}
}
