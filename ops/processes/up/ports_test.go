package up

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// TestCheckFreeNamesTheBusyPort: a port the system must listen on that is
// taken is refused at once, naming the port and what to do.
func TestCheckFreeNamesTheBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	free.Close()
	err = ClusterFile{NATSPort: busy, StoreAddrs: []string{freeAddr}}.checkFree(false)
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), "the NATS port "+l.Addr().String()+" is in use") || !strings.Contains(err.Error(), "--nats-port") {
		t.Fatalf("busy NATS port: %v", err)
	}
	err = ClusterFile{NATSPort: free.Addr().(*net.TCPAddr).Port, StoreAddrs: []string{l.Addr().String()}}.checkFree(false)
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), "store replica 1's raft port") {
		t.Fatalf("busy raft port: %v", err)
	}
	if err := (ClusterFile{NATSPort: free.Addr().(*net.TCPAddr).Port}).checkFree(false); err != nil {
		t.Fatalf("free ports: %v", err)
	}
}
