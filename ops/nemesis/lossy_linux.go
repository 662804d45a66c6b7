package nemesis

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LossyPath is a path for TCP connections through the kernel that can
// lose packets: two network namespaces podflow creates (pf-nem-PID-ID-a
// and pf-nem-PID-ID-b, PID the creating process's) joined by a veth pair
// (pfnIDa, pfnIDb), each namespace
// with an nftables table pf_nem whose output chain drops a random share
// of the packets (numgen random; this kernel has no netem). Dial(target) opens a connection from a socket in
// namespace a to a forwarder listening in namespace b for that target,
// which dials the target (a loopback address of this machine) from the
// host; SetLoss sets the share of packets each end drops, so TCP
// retransmits, stalls and, past its timeouts, gives up, as on a lossy
// link. Traffic never leaves the machine: the veth pair only joins the
// two namespaces. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN). Close
// removes the namespaces, and the veth pair with them; the namespaces of a
// process that died before its Close are removed by the next
// NewLossyPath (SweepLossyLeftovers).
type LossyPath struct {
	id       string
	nsA, nsB netns.NsHandle
	hA, hB   *netlink.Handle
	fwd      map[string]net.Listener // target → forwarder in namespace b
	r        *relay                  // the forwarders' relay, to each target from the host
}

const (
	lossyAddrA = "10.254.0.1"
	lossyAddrB = "10.254.0.2"
)

// NewLossyPath creates the namespaces and the veth pair and a forwarder
// for every target; on error nothing it created is left.
func NewLossyPath(targets []string) (p *LossyPath, err error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := SweepLossyLeftovers(); err != nil {
		return nil, err
	}
	p = &LossyPath{id: hex.EncodeToString(b), fwd: map[string]net.Listener{}, r: newRelay()}
	defer func() {
		if err != nil {
			p.Close()
			p = nil
		}
	}()
	if p.nsA, err = newNamedNS(p.nsName("a")); err != nil {
		return p, err
	}
	if p.nsB, err = newNamedNS(p.nsName("b")); err != nil {
		return p, err
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "pfn" + p.id + "a"}, PeerName: "pfn" + p.id + "b"}
	if err := netlink.LinkAdd(veth); err != nil {
		return p, fmt.Errorf("nemesis: veth %s: %w", veth.Name, err)
	}
	for _, end := range []struct {
		name string
		ns   netns.NsHandle
		h    **netlink.Handle
		addr string
	}{{veth.Name, p.nsA, &p.hA, lossyAddrA}, {veth.PeerName, p.nsB, &p.hB, lossyAddrB}} {
		l, err := netlink.LinkByName(end.name)
		if err != nil {
			return p, err
		}
		if err := netlink.LinkSetNsFd(l, int(end.ns)); err != nil {
			return p, fmt.Errorf("nemesis: move %s: %w", end.name, err)
		}
		if *end.h, err = netlink.NewHandleAt(end.ns); err != nil {
			return p, err
		}
		h := *end.h
		if l, err = h.LinkByName(end.name); err != nil {
			return p, err
		}
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(end.addr), Mask: net.CIDRMask(30, 32)}}); err != nil {
			return p, fmt.Errorf("nemesis: address %s: %w", end.name, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			return p, err
		}
	}
	if err := p.SetLoss(0); err != nil {
		return p, err
	}
	for _, t := range targets {
		var l net.Listener
		if err := inNS(p.nsB, func() (err error) { l, err = net.Listen("tcp", lossyAddrB+":0"); return err }); err != nil {
			return p, fmt.Errorf("nemesis: forwarder for %s: %w", t, err)
		}
		p.fwd[t] = l
		p.r.serve(l, func() (net.Conn, error) { return net.DialTimeout("tcp", t, 2*time.Second) }, // from the host
			func(dst, src net.Conn) { _, _ = io.Copy(dst, src) })
	}
	return p, nil
}

func (p *LossyPath) nsName(side string) string {
	return lossyPrefix + strconv.Itoa(os.Getpid()) + "-" + p.id + "-" + side
}

// lossyPrefix begins the name of every LossyPath namespace.
const lossyPrefix = "pf-nem-"

// netnsDir is where named network namespaces are mounted (iproute2's).
const netnsDir = "/run/netns"

// SweepLossyLeftovers removes the LossyPath namespaces of processes that
// are gone (a chaos run SIGKILLed before its Close): their veth pairs go
// with them. Namespaces of live processes are left alone.
func SweepLossyLeftovers() error {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var errs error
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), lossyPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		errs = errors.Join(errs, netns.DeleteNamed(e.Name()))
	}
	return errs
}

// processAlive reports whether a process pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// SetLoss makes each namespace drop percent (0–100) of the packets it
// sends: in one nftables transaction per namespace, the table pf_nem
// (inet) and its output chain are created if absent, the chain is
// flushed and, above 0 %, gets the rule nft would print as
// "numgen random mod 100 < percent counter drop".
func (p *LossyPath) SetLoss(percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("nemesis: loss %d%% out of 0–100", percent)
	}
	for _, side := range []string{"a", "b"} {
		c, err := p.nftConn(side)
		if err != nil {
			return fmt.Errorf("nemesis: set loss %d%%: %w", percent, err)
		}
		table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: lossyTable})
		chain := c.AddChain(&nftables.Chain{Name: lossyChain, Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: ptr(nftables.ChainPolicyAccept)})
		c.FlushChain(chain)
		if percent > 0 {
			c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: lossExprs(percent)})
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("nemesis: set loss %d%% in %s: %w", percent, p.nsName(side), err)
		}
	}
	return nil
}

const (
	lossyTable = "pf_nem"
	lossyChain = "out"
)

// lossExprs drops percent (1–100) of the packets, counting them. The
// random number is in host byte order and the kernel's cmp compares
// bytes, so it is turned big-endian before "< percent", as nft does.
func lossExprs(percent int) []expr.Any {
	drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	if percent >= 100 {
		return drop
	}
	return append([]expr.Any{
		&expr.Numgen{Register: 1, Modulus: 100, Type: unix.NFT_NG_RANDOM},
		&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 4, Size: 4},
		&expr.Cmp{Op: expr.CmpOpLt, Register: 1, Data: binaryutil.BigEndian.PutUint32(uint32(percent))},
	}, drop...)
}

func ptr[T any](v T) *T { return &v }

// Drops is how many packets the namespaces dropped since the last SetLoss.
func (p *LossyPath) Drops() (int, error) {
	n := 0
	for _, side := range []string{"a", "b"} {
		c, err := p.nftConn(side)
		if err != nil {
			return 0, err
		}
		rules, err := c.GetRules(&nftables.Table{Family: nftables.TableFamilyINet, Name: lossyTable}, &nftables.Chain{Name: lossyChain})
		if err != nil {
			return 0, fmt.Errorf("nemesis: rules of %s: %w", p.nsName(side), err)
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				if ctr, ok := e.(*expr.Counter); ok {
					n += int(ctr.Packets)
				}
			}
		}
	}
	return n, nil
}

// nftConn is a netlink connection to nftables in the namespace of side.
func (p *LossyPath) nftConn(side string) (*nftables.Conn, error) {
	ns := p.nsA
	if side == "b" {
		ns = p.nsB
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return nil, fmt.Errorf("nemesis: nftables in %s: %w", p.nsName(side), err)
	}
	return c, nil
}

// Dial opens a connection to target (one of NewLossyPath's) over the path.
func (p *LossyPath) Dial(target string, timeout time.Duration) (net.Conn, error) {
	l, ok := p.fwd[target]
	if !ok {
		return nil, fmt.Errorf("nemesis: no lossy path to %s", target)
	}
	var c net.Conn
	err := inNS(p.nsA, func() (err error) { c, err = net.DialTimeout("tcp", l.Addr().String(), timeout); return err })
	return c, err
}

// Close stops the forwarders and removes the namespaces (and the veth
// pair in them).
func (p *LossyPath) Close() error {
	p.r.close()
	var err error
	for _, h := range []*netlink.Handle{p.hA, p.hB} {
		if h != nil {
			h.Close()
		}
	}
	for i, ns := range []netns.NsHandle{p.nsA, p.nsB} {
		if ns.IsOpen() {
			ns.Close()
			err = errors.Join(err, netns.DeleteNamed(p.nsName(string("ab"[i]))))
		}
	}
	if l, e := netlink.LinkByName("pfn" + p.id + "a"); e == nil { // not moved yet
		err = errors.Join(err, netlink.LinkDel(l))
	}
	return err
}

// newNamedNS creates a named network namespace without leaving the
// calling thread in it.
func newNamedNS(name string) (netns.NsHandle, error) {
	var ns netns.NsHandle
	err := withOrigNS(func() (err error) {
		ns, err = netns.NewNamed(name)
		if err != nil {
			return fmt.Errorf("nemesis: namespace %s: %w", name, err)
		}
		return nil
	})
	return ns, err
}

// inNS runs fn on a thread in ns (sockets fn creates stay in ns).
func inNS(ns netns.NsHandle, fn func() error) error {
	return withOrigNS(func() error {
		if err := netns.Set(ns); err != nil {
			return err
		}
		return fn()
	})
}

// withOrigNS runs fn on a goroutine locked to its thread and puts the
// thread back in its namespace afterwards; a thread that cannot go back
// stays locked, so the runtime ends it with that goroutine.
func withOrigNS(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			done <- errors.Join(ferr, err) // exits locked: the thread ends
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

var _ Path = (*LossyPath)(nil)
