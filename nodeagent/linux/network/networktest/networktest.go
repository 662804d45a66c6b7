// Package networktest holds helpers for tests that run code inside network
// namespaces podflow created.
package networktest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// RequireRoot skips t unless the test runs as root and can create network
// namespaces.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, veths and bridges")
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		t.Skipf("needs network namespaces: %v", err)
	}
}

// Do runs fn on an OS thread inside the network namespace at nsPath and
// returns its error. Sockets fn creates belong to that namespace for their
// whole life and may be used from any goroutine afterwards. The thread
// returns to its namespace afterwards; if it cannot, it is thrown away.
func Do(nsPath string, fn func() error) error {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("open netns %q: %w", nsPath, err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %q: %w", nsPath, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %q: %w", nsPath, err))
			return // still locked: the thread is discarded
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// FreePodCIDR returns a /24 inside 10.244.0.0/16 that no address or route
// of the host network namespace overlaps, so tests running in parallel
// (and other node agents) do not collide.
func FreePodCIDR() (string, error) {
	used := []netip.Prefix{}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			used = append(used, p)
		}
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return "", err
	}
	for _, r := range routes {
		if p, ok := prefixOf(r.Dst); ok && p.Bits() > 0 {
			used = append(used, p)
		}
	}
	start := rand.IntN(150)
	for i := range 150 {
		cand := netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", 100+(start+i)%150))
		free := true
		for _, u := range used {
			if u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand.String(), nil
		}
	}
	return "", fmt.Errorf("no free /24 in 10.244.100.0-10.244.249.0")
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip, ones).Masked(), true
}
