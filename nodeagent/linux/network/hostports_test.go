package network

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestHostPortRules: where each mapping is published — every node
// address for no hostIP (or 0.0.0.0), one node address, loopback for the
// host alone, nothing for an address that is not the node's — and which
// pod wins a conflict.
func TestHostPortRules(t *testing.T) {
	gw, lan := netip.MustParseAddr("10.244.1.1"), netip.MustParseAddr("192.168.7.2")
	pods := map[string]podPorts{
		"b": {IP: "10.244.1.12", Ports: []HostPort{
			{HostPort: 8080, ContainerPort: 80},
			{HostPort: 5353, ContainerPort: 53, Protocol: "UDP", HostIP: "192.168.7.2"},
			{HostPort: 9090, ContainerPort: 90, HostIP: "127.0.0.1"},
			{HostPort: 9091, ContainerPort: 91, HostIP: "10.9.9.9"},
			{HostPort: 0, ContainerPort: 92},
		}},
		"a": {IP: "10.244.1.11", Ports: []HostPort{{HostPort: 8080, ContainerPort: 8080, HostIP: "0.0.0.0"}}},
	}
	var got []string
	for _, r := range hostPortRules(gw, []netip.Addr{lan}, pods) {
		got = append(got, r.String())
	}
	want := []string{ // by port, protocol, address, pod: pod a wins 8080
		`[prerouting iifname "pf*", output] ip daddr 192.168.7.2 udp dport 5353 dnat to 10.244.1.12:53`,
		`[prerouting iifname "pf*", output] ip daddr 10.244.1.1 tcp dport 8080 dnat to 10.244.1.11:8080`,
		`[prerouting iifname "pf*", output] ip daddr 10.244.1.1 tcp dport 8080 dnat to 10.244.1.12:80`,
		`[prerouting iifname "pf*", output] ip daddr 192.168.7.2 tcp dport 8080 dnat to 10.244.1.11:8080`,
		`[prerouting iifname "pf*", output] ip daddr 192.168.7.2 tcp dport 8080 dnat to 10.244.1.12:80`,
		`[output] ip daddr 127.0.0.1 tcp dport 9090 dnat to 10.244.1.12:90`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestHostPortKernel: a pod's hostPort answers on the node's address from
// the host, from another pod of the node and from the pod itself (which
// the pod sees as the gateway: the hairpin SNAT), on loopback for a host client with a node
// address as its source (the conformance test's `curl --interface`), and
// is gone with the pod's Teardown, the table with the last mapping or
// with the bridge.
func TestHostPortKernel(t *testing.T) {
	m := newNode(t, "")
	ctx := testContext(t)
	server, err := m.Setup(ctx, "server")
	if err != nil {
		t.Fatal(err)
	}
	client, err := m.Setup(ctx, "client")
	if err != nil {
		t.Fatal(err)
	}
	ln := listenIn(t, server)
	_, cport, _ := net.SplitHostPort(ln.Addr().String())
	cp, _ := strconv.Atoi(cport)
	// The host ports: free ones, held by listeners of this test on the
	// gateway and on loopback, which answer "host" — so a connection
	// the rules do not take is seen.
	hostLn := func(ip string) (net.Listener, int) {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("host\n"))
				c.Close()
			}
		}()
		_, p, _ := net.SplitHostPort(l.Addr().String())
		n, _ := strconv.Atoi(p)
		return l, n
	}
	_, hp := hostLn(server.Gateway)
	_, lp := hostLn("127.0.0.1")
	gwAddr := net.JoinHostPort(server.Gateway, strconv.Itoa(hp))
	if who, err := ask("", gwAddr); err != nil || who != "host" {
		t.Fatalf("before any mapping %s answered %q, %v; want the host's listener", gwAddr, who, err)
	}
	if err := m.SetHostPorts("server", server.IP, []HostPort{
		{HostPort: int32(hp), ContainerPort: int32(cp)},
		{HostPort: int32(lp), ContainerPort: int32(cp), HostIP: "127.0.0.1"},
	}); err != nil {
		t.Fatal(err)
	}
	if who, err := ask("", gwAddr); err != nil || who != server.Gateway {
		t.Fatalf("host → %s: %q, %v; want the pod, seeing the gateway", gwAddr, who, err)
	}
	if who, err := ask(client.NetnsPath, gwAddr); err != nil || who != server.Gateway {
		t.Fatalf("pod → %s: %q, %v; want the pod, seeing the gateway (hairpin)", gwAddr, who, err)
	}
	if who, err := ask(server.NetnsPath, gwAddr); err != nil || who != server.Gateway {
		t.Fatalf("the pod → its own hostPort %s: %q, %v; want itself, seeing the gateway (hairpin)", gwAddr, who, err)
	}
	loop := net.JoinHostPort("127.0.0.1", strconv.Itoa(lp))
	if who, err := askFrom(server.Gateway, loop); err != nil || who != server.Gateway {
		t.Fatalf("host from %s → %s: %q, %v; want the pod", server.Gateway, loop, who, err)
	}
	if out, err := exec.Command("nft", "list", "table", "ip", m.cfg.HostPortTable()).CombinedOutput(); err == nil && strings.Contains(string(out), "masquerade") {
		t.Fatalf("the hostport table masquerades:\n%s", out)
	}

	if err := m.Teardown(ctx, "server"); err != nil {
		t.Fatal(err)
	}
	if who, err := ask("", gwAddr); err != nil || who != "host" {
		t.Fatalf("after Teardown %s answered %q, %v; want the host's listener", gwAddr, who, err)
	}
	if out, err := exec.Command("nft", "list", "table", "ip", m.cfg.HostPortTable()).CombinedOutput(); err == nil {
		t.Fatalf("hostport table left after the last mapping went:\n%s", out)
	}

	// The node goes (decommission) with a mapping left: the table goes
	// with the bridge.
	if err := m.SetHostPorts("client", client.IP, []HostPort{{HostPort: int32(hp), ContainerPort: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveBridge(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nft", "list", "table", "ip", m.cfg.HostPortTable()).CombinedOutput(); err == nil {
		t.Fatalf("hostport table left after RemoveBridge:\n%s", out)
	}
}

// askFrom is ask from the host with src as the local address.
func askFrom(src, addr string) (string, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	b := make([]byte, 64)
	n, _ := c.Read(b)
	return strings.TrimSpace(string(b[:n])), nil
}
