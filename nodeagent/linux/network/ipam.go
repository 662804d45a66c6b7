package network

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ipam allocates pod addresses from one CIDR, persisted as CNI host-local
// does: one file per allocated address, named by the address and holding the
// pod UID, created atomically (a complete temp file hard-linked into place,
// which fails with EEXIST when the address is taken), removed on release.
// An flock on dir/lock serialises allocators across processes, the mutex
// within one; the exclusive link keeps even a rogue writer from handing an
// address out twice.
//
// Nothing is fsynced: the files must survive the agent, not the machine. A
// machine crash takes every network namespace with it, and an allocation
// file a crash left empty (its content not yet written back) is removed by
// the next allocation; an address is never given out while its file exists.
type ipam struct {
	dir    string
	subnet netip.Prefix
	gw     netip.Addr
	mu     sync.Mutex
}

const lastReservedFile = "last_reserved_ip"

func newIPAM(dataDir string, subnet netip.Prefix) (*ipam, error) {
	dir := filepath.Join(dataDir, "ipam", strings.ReplaceAll(subnet.String(), "/", "_"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("network: ipam dir: %w", err)
	}
	return &ipam{dir: dir, subnet: subnet, gw: subnet.Addr().Next()}, nil
}

// lock takes the in-process and the cross-process lock; call the returned
// function to release both.
func (a *ipam) lock() (func(), error) {
	a.mu.Lock()
	f, err := os.OpenFile(filepath.Join(a.dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		a.mu.Unlock()
		return nil, fmt.Errorf("network: ipam lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		a.mu.Unlock()
		return nil, fmt.Errorf("network: ipam flock: %w", err)
	}
	return func() { f.Close(); a.mu.Unlock() }, nil // close drops the flock
}

// list returns pod UID → address of every allocation on disk.
func (a *ipam) list() (map[string]netip.Addr, error) {
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		return nil, fmt.Errorf("network: ipam list: %w", err)
	}
	out := map[string]netip.Addr{}
	for _, e := range entries {
		ip, err := netip.ParseAddr(e.Name())
		if err != nil || !a.subnet.Contains(ip) {
			continue // lock, last_reserved_ip, temp files
		}
		b, err := os.ReadFile(filepath.Join(a.dir, e.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("network: ipam read %q: %w", e.Name(), err)
		}
		uid := strings.TrimSpace(string(b))
		if uid == "" { // left empty by a machine crash: nobody's
			_ = os.Remove(filepath.Join(a.dir, e.Name()))
			continue
		}
		out[uid] = ip
	}
	return out, nil
}

// allocate returns podUID's address, allocating one when it has none;
// fresh says whether it was allocated by this call.
func (a *ipam) allocate(podUID string) (ip netip.Addr, fresh bool, err error) {
	unlock, err := a.lock()
	if err != nil {
		return netip.Addr{}, false, err
	}
	defer unlock()
	held, err := a.list()
	if err != nil {
		return netip.Addr{}, false, err
	}
	if ip, ok := held[podUID]; ok {
		return ip, false, nil
	}
	start := a.gw
	if b, err := os.ReadFile(filepath.Join(a.dir, lastReservedFile)); err == nil {
		if last, err := netip.ParseAddr(strings.TrimSpace(string(b))); err == nil && a.usable(last) {
			start = last
		}
	}
	// Round robin from the address after the last one handed out, so a
	// released address is reused as late as possible.
	for cand := a.next(start); ; cand = a.next(cand) {
		if err := a.claim(cand, podUID); err == nil {
			_ = writeInPlace(filepath.Join(a.dir, lastReservedFile), cand.String())
			return cand, true, nil
		} else if !errors.Is(err, fs.ErrExist) {
			return netip.Addr{}, false, err
		}
		if cand == start || (start == a.gw && cand == a.last()) {
			return netip.Addr{}, false, fmt.Errorf("%w: %s", ErrRangeFull, a.subnet)
		}
	}
}

// claim creates the allocation file of ip for podUID; fs.ErrExist when ip
// is taken.
func (a *ipam) claim(ip netip.Addr, podUID string) error {
	tmp, err := os.CreateTemp(a.dir, ".claim-")
	if err != nil {
		return fmt.Errorf("network: ipam claim: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(podUID)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("network: ipam claim: %w", err)
	}
	if err := os.Link(tmp.Name(), filepath.Join(a.dir, ip.String())); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fs.ErrExist
		}
		return fmt.Errorf("network: ipam claim %s: %w", ip, err)
	}
	return nil
}

// release frees podUID's address; releasing an unknown pod is not an error.
func (a *ipam) release(podUID string) error {
	unlock, err := a.lock()
	if err != nil {
		return err
	}
	defer unlock()
	held, err := a.list()
	if err != nil {
		return err
	}
	ip, ok := held[podUID]
	if !ok {
		return nil
	}
	if err := os.Remove(filepath.Join(a.dir, ip.String())); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("network: ipam release %s: %w", ip, err)
	}
	return nil
}

// usable reports whether ip may be given to a pod: inside the subnet, not
// the network, gateway or broadcast address.
func (a *ipam) usable(ip netip.Addr) bool {
	return a.subnet.Contains(ip) && ip != a.subnet.Addr() && ip != a.gw && ip != a.broadcast()
}

func (a *ipam) broadcast() netip.Addr {
	b := a.subnet.Addr().As4()
	host := uint32(1)<<(32-a.subnet.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// first and last usable pod addresses.
func (a *ipam) first() netip.Addr { return a.gw.Next() }
func (a *ipam) last() netip.Addr  { return a.broadcast().Prev() }

// next returns the usable address after ip, wrapping around.
func (a *ipam) next(ip netip.Addr) netip.Addr {
	n := ip.Next()
	if !a.usable(n) {
		return a.first()
	}
	return n
}

// writeInPlace overwrites path with s padded to a fixed width, without
// truncating or renaming: ext4 flushes data on replace-by-rename and
// replace-by-truncate, which costs milliseconds per allocation. The file
// is only a hint (where the round robin resumes); a torn write is harmless.
func writeInPlace(path, s string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteAt([]byte(fmt.Sprintf("%-15s\n", s)), 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
