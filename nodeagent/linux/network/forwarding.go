package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Forwarding between podflow bridges needs net.ipv4.conf.<bridge>.forwarding
// =1 on the bridge a packet arrives on (the kernel asks the input device
// only). That per-interface value is not podflow's alone to keep: every
// write that changes net.ipv4.ip_forward (= net.ipv4.conf.all.forwarding)
// copies the new value onto every interface of the namespace. A host with
// ip_forward=0 on which anything toggles it (an administrator's sysctl -w
// and back, a daemon, another test restoring "its" value) silently turns
// forwarding off on every podflow bridge, and pods of different nodes stop
// reaching each other until the agent restarts. So the Manager keeps its
// bridge's value: the kernel announces every forwarding change on the
// RTNLGRP_IPV4_NETCONF multicast group, and on each announcement the
// keeper sets the bridge's own value back to 1. The global values are
// never written.

// forwardKeeper holds forwarding=1 on one bridge while it runs.
type forwardKeeper struct {
	sock *nl.NetlinkSocket
	done chan struct{}
}

// startForwardKeeper sets the bridge's forwarding to 1 and keeps it there
// until stopForwardKeeper. It subscribes to forwarding changes in the host
// namespace first and writes after, so that no change in between is
// missed. Idempotent; callers hold m.mu.
func (m *Manager) startForwardKeeper() error {
	if m.closed.Load() {
		return errors.New("manager is closed")
	}
	if m.keeper == nil {
		sock, err := nl.SubscribeAt(m.hostNS, netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_NETCONF)
		if err != nil {
			return fmt.Errorf("subscribe to forwarding changes: %w", err)
		}
		k := &forwardKeeper{sock: sock, done: make(chan struct{})}
		go func() {
			defer close(k.done)
			for {
				// Which device changed does not matter: re-reading one
				// sysctl is cheaper than parsing, and an overflow (ENOBUFS:
				// announcements lost) is handled the same way.
				if _, _, err := sock.Receive(); err != nil && !errors.Is(err, unix.ENOBUFS) {
					return // the socket was closed (or broke)
				}
				_ = m.keepForwarding() // the bridge may be gone: nothing to forward
			}
		}()
		m.keeper = k
	}
	return m.keepForwarding()
}

// stopForwardKeeper stops the keeper, if any, and waits for it. Callers
// hold m.mu.
func (m *Manager) stopForwardKeeper() {
	if m.keeper == nil {
		return
	}
	m.keeper.sock.Close()
	<-m.keeper.done
	m.keeper = nil
}

// keepForwarding sets net.ipv4.conf.<bridge>.forwarding to 1 in the host
// namespace unless it is 1 already.
func (m *Manager) keepForwarding() error {
	return inNetns(m.hostNS, func() error { return writeSysctl(forwardingKey(m.cfg.BridgeName), "1") })
}

func forwardingKey(link string) string {
	return filepath.Join("/proc/sys/net/ipv4/conf", link, "forwarding")
}

func writeSysctl(path, value string) error {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == value {
		return nil
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", path, value, err)
	}
	return nil
}
