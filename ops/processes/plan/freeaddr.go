package plan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Ports for the processes `up` starts are taken below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), never from it: a port
// picked there and released until the child binds it can meanwhile become
// the local port of any outgoing connection on the machine — a client of
// NATS or of a store replica holds it for as long as it lives, and the
// child then fails with "address already in use" on every restart. Below
// the range, only a process that binds that very number explicitly can
// take it.
const (
	pickLow  = 20000 // the lowest port picked
	pickSpan = 1000  // the fewest ports worth picking from
	pickTry  = 64
)

// handed holds the ports FreeAddr returned in this process. A port is
// free when picked, and stays free until the process it is meant for binds
// it: without this, a second pick of `up`'s (another stage replica's
// metrics, a store replica's raft port) could return the same number, and
// whichever binds second fails with "address already in use" on every
// restart — as admission-2 and status-1 once did in TestChaos.
//
// The same holds between processes: two `podflow up`s on one machine (the
// tests of two packages at once) pick from the same range, and a port
// stays free from the pick until the child binds it, and again from a
// kill of that child until its restart binds it. So a port is also
// claimed on the machine: this process holds an flock on the file
// podflow-ports/<port> in the temp directory for as long as it lives (the
// kernel drops it when the process dies, SIGKILL included), and no other
// process picks a port whose file is locked. The files stay, empty, one
// per port ever picked; without a writable directory, ports are claimed
// within this process only.
var handed struct {
	sync.Mutex
	ports map[int]*os.File // the claim file held locked; nil without one
}

var claimDir = filepath.Join(os.TempDir(), "podflow-ports")

// claim marks port handed out; false if it already was, in this process
// or by another one alive.
func claim(port int) bool {
	handed.Lock()
	defer handed.Unlock()
	if _, ok := handed.ports[port]; ok {
		return false
	}
	f, ok := claimOnMachine(port)
	if !ok {
		return false
	}
	if handed.ports == nil {
		handed.ports = map[int]*os.File{}
	}
	handed.ports[port] = f
	return true
}

// claimOnMachine locks port's claim file: false if another process holds
// it. Without a usable claim file the claim is this process's alone
// (nil, true).
//
// The directory is shared, like the temp directory it is in, so what
// another user may have put there is not followed: the directory must be
// a real one (not a symbolic link) owned by root or by this user, and the
// file is opened read-only (flock needs no more) and not through a
// symbolic link, so a planted link never makes this process create or
// open a file elsewhere.
func claimOnMachine(port int) (*os.File, bool) {
	if err := os.Mkdir(claimDir, 0o755); err == nil {
		_ = os.Chmod(claimDir, 0o1777) // every user's podflow claims here, as in /tmp
	} else if !errors.Is(err, os.ErrExist) {
		return nil, true
	}
	if !trustedDir(claimDir) {
		return nil, true
	}
	f, err := os.OpenFile(filepath.Join(claimDir, strconv.Itoa(port)), os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, !errors.Is(err, syscall.EWOULDBLOCK)
	}
	return f, true
}

// trustedDir reports whether dir is a directory itself, not a symbolic
// link, owned by root or by this process's user.
func trustedDir(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && (st.Uid == 0 || int(st.Uid) == os.Geteuid())
}

// FreeAddr returns a loopback address with a port free right now, below
// the ephemeral port range when the machine leaves room there, never one
// it returned before in this process, nor one another live process
// claimed (see handed).
func FreeAddr() (string, error) {
	if hi := ephemeralLow(); hi-pickLow >= pickSpan {
		for range pickTry {
			port := pickLow + rand.IntN(hi-pickLow)
			if !claim(port) {
				continue
			}
			if addr, err := listenFree(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return addr, nil
			}
		}
	}
	// No room below the range, or no free port found there: the kernel
	// picks, still never a port handed out before.
	for range pickTry {
		addr, err := listenFree("127.0.0.1:0")
		if err != nil {
			return "", err
		}
		if _, p, _ := net.SplitHostPort(addr); claimed(p) {
			return addr, nil
		}
	}
	return "", fmt.Errorf("plan: no free loopback port not handed out already after %d tries", pickTry)
}

// claimed is claim of a port in text.
func claimed(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && claim(n)
}

func listenFree(addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default 32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// FreeAddrs returns n distinct loopback addresses with ports free right
// now (see FreeAddr).
func FreeAddrs(n int) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}
