package plan

import (
	"net"
	"strconv"
	"testing"
)

// Ports handed to child processes come from below the ephemeral range, so
// no outgoing connection can hold them by the time the child binds.
func TestFreeAddrBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	addrs, err := FreeAddrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		host, p, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q", a)
		}
		port, _ := strconv.Atoi(p)
		if low-pickLow >= pickSpan && (port < pickLow || port >= low) {
			t.Errorf("port %d outside [%d, %d)", port, pickLow, low)
		}
		if seen[a] {
			t.Errorf("%s handed out twice", a)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("the free address %s cannot be bound: %v", a, err)
		}
		l.Close()
	}
}

// TestFreeAddrNeverRepeats: 600 separate picks, each released at once as a
// picked port is until its process binds it, are all distinct. Without the
// record of ports handed out, 600 picks from the ~12,000 ports below the
// ephemeral range repeat one almost surely (about 15 pairs expected).
func TestFreeAddrNeverRepeats(t *testing.T) {
	if ephemeralLow()-pickLow < pickSpan {
		t.Skip("no room below the ephemeral port range on this machine: picks come from the kernel")
	}
	seen := map[string]bool{}
	for range 600 {
		a, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}
