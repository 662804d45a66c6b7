package nemesis

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Bypasses names every established TCP connection to a node's real
// address that this process did not open: traffic around the relays, such
// as a NATS route a server learnt by gossip and dialled directly. The
// relays dial from this process, so a connection is relayed exactly when
// its socket is one of this process's (/proc/self/fd); the connections
// come from the kernel's tables (/proc/net/tcp, tcp6). The nodes must be
// other processes (as in podflow chaos) and this process must open no
// other connection to a node's real address.
func (n *Net) Bypasses() ([]string, error) {
	targets := map[string]string{} // real address → node
	n.mu.Lock()
	for e, l := range n.links {
		targets[l.target] = e.To
	}
	n.mu.Unlock()
	// The sockets of this process are read before and after the tables,
	// so that a relayed connection opened meanwhile counts as relayed
	// unless it also closed meanwhile.
	own, err := ownSockets(nil)
	if err != nil {
		return nil, err
	}
	var conns []tcpConn
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		cs, err := tcpTable(file)
		if err != nil {
			return nil, err
		}
		conns = append(conns, cs...)
	}
	if own, err = ownSockets(own); err != nil {
		return nil, err
	}
	var out []string
	for _, c := range conns {
		if node, ok := targets[c.remote]; ok && c.established && !own[c.inode] {
			out = append(out, fmt.Sprintf("%s → %s (%s) not through a relay", c.local, c.remote, node))
		}
	}
	sort.Strings(out)
	return out, nil
}

// ownSockets adds the inodes of this process's sockets to out.
func ownSockets(out map[string]bool) (map[string]bool, error) {
	fds, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = map[string]bool{}
	}
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err == nil && strings.HasPrefix(l, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return out, nil
}

type tcpConn struct {
	local, remote, inode string
	established          bool
}

// tcpTable reads a /proc/net/tcp-format table.
func tcpTable(file string) ([]tcpConn, error) {
	f, err := os.Open(file)
	if err != nil {
		if os.IsNotExist(err) && strings.HasSuffix(file, "6") {
			return nil, nil // no IPv6
		}
		return nil, err
	}
	defer f.Close()
	var out []tcpConn
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		local, err1 := procAddr(f[1])
		remote, err2 := procAddr(f[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("nemesis: %s: %q", file, sc.Text())
		}
		out = append(out, tcpConn{local: local, remote: remote, inode: f[9], established: f[3] == "01"})
	}
	return out, sc.Err()
}

// procAddr decodes "0100007F:1F90" (each 32-bit word of the address in
// host order, little-endian here) to "127.0.0.1:8080"; an IPv4-mapped
// IPv6 address decodes to its IPv4 form.
func procAddr(s string) (string, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("no port in %q", s)
	}
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return "", fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", fmt.Errorf("port %q", s)
	}
	ip := net.IP(b)
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), nil
}
