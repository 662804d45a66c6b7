package network

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestIPAMAllocateIsPersistentAndIdempotent(t *testing.T) {
	dir := t.TempDir()
	subnet := netip.MustParsePrefix("10.244.7.0/24")
	a, err := newIPAM(dir, subnet)
	if err != nil {
		t.Fatal(err)
	}
	ip1, fresh, err := a.allocate("pod-1")
	if err != nil || !fresh {
		t.Fatalf("allocate = %v, %v, %v", ip1, fresh, err)
	}
	if ip1 != netip.MustParseAddr("10.244.7.2") {
		t.Fatalf("first address %s, want 10.244.7.2 (10.244.7.1 is the gateway)", ip1)
	}
	again, fresh, err := a.allocate("pod-1")
	if err != nil || fresh || again != ip1 {
		t.Fatalf("second allocate = %v, %v, %v; want %v, not fresh", again, fresh, err, ip1)
	}
	// A new allocator over the same directory (an agent restart) sees it.
	b, err := newIPAM(dir, subnet)
	if err != nil {
		t.Fatal(err)
	}
	if got, fresh, err := b.allocate("pod-1"); err != nil || fresh || got != ip1 {
		t.Fatalf("after restart allocate = %v, %v, %v; want %v", got, fresh, err, ip1)
	}
	ip2, _, err := b.allocate("pod-2")
	if err != nil || ip2 == ip1 {
		t.Fatalf("pod-2 got %v, %v", ip2, err)
	}
	if err := b.release("pod-1"); err != nil {
		t.Fatal(err)
	}
	if err := b.release("pod-1"); err != nil {
		t.Fatalf("second release: %v", err)
	}
	held, err := a.list()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held["pod-2"] != ip2 {
		t.Fatalf("held = %v, want only pod-2 → %s", held, ip2)
	}
	// Round robin: a released address is not the next one handed out.
	ip3, _, err := b.allocate("pod-3")
	if err != nil || ip3 == ip1 || ip3 == ip2 {
		t.Fatalf("pod-3 got %v, %v (released %v, held %v)", ip3, err, ip1, ip2)
	}
}

func TestIPAMRangeFull(t *testing.T) {
	a, err := newIPAM(t.TempDir(), netip.MustParsePrefix("10.244.7.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	// /29: .0 network, .1 gateway, .7 broadcast: five pod addresses.
	seen := map[netip.Addr]bool{}
	for i := range 5 {
		ip, _, err := a.allocate(fmt.Sprintf("pod-%d", i))
		if err != nil {
			t.Fatalf("allocate %d: %v", i, err)
		}
		if !a.usable(ip) || seen[ip] {
			t.Fatalf("allocate %d = %s (seen %v)", i, ip, seen)
		}
		seen[ip] = true
	}
	if _, _, err := a.allocate("pod-5"); !errors.Is(err, ErrRangeFull) {
		t.Fatalf("sixth allocate = %v, want ErrRangeFull", err)
	}
	if err := a.release("pod-2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.allocate("pod-5"); err != nil {
		t.Fatalf("allocate after release: %v", err)
	}
}

// TestIPAMConcurrent allocates from many goroutines through two allocators
// over one directory (two agent processes would share it the same way),
// some of them for the same pod: every pod gets one address, no address
// goes to two pods.
func TestIPAMConcurrent(t *testing.T) {
	dir := t.TempDir()
	subnet := netip.MustParsePrefix("10.244.8.0/24")
	allocs := make([]*ipam, 2)
	for i := range allocs {
		var err error
		if allocs[i], err = newIPAM(dir, subnet); err != nil {
			t.Fatal(err)
		}
	}
	const pods, perPod = 100, 3
	got := make([][perPod]netip.Addr, pods)
	var wg sync.WaitGroup
	errs := make(chan error, pods*perPod)
	for p := range pods {
		for k := range perPod {
			wg.Go(func() {
				ip, _, err := allocs[(p+k)%2].allocate(fmt.Sprintf("pod-%d", p))
				if err != nil {
					errs <- err
					return
				}
				got[p][k] = ip
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	owner := map[netip.Addr]int{}
	for p := range pods {
		for k := range perPod {
			if got[p][k] != got[p][0] {
				t.Fatalf("pod-%d got %s and %s", p, got[p][0], got[p][k])
			}
		}
		if q, dup := owner[got[p][0]]; dup {
			t.Fatalf("%s handed to pod-%d and pod-%d", got[p][0], q, p)
		}
		owner[got[p][0]] = p
	}
	held, err := allocs[0].list()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != pods {
		t.Fatalf("%d allocations on disk, want %d", len(held), pods)
	}
	// Release concurrently too: nothing is left.
	errs = make(chan error, pods)
	for p := range pods {
		wg.Go(func() {
			if err := allocs[p%2].release(fmt.Sprintf("pod-%d", p)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if held, _ := allocs[1].list(); len(held) != 0 {
		t.Fatalf("after release %d allocations remain: %v", len(held), held)
	}
}

// BenchmarkIPAMAllocateRelease is one pod's address allocation and release
// on disk.
func BenchmarkIPAMAllocateRelease(b *testing.B) {
	a, err := newIPAM(b.TempDir(), netip.MustParsePrefix("10.244.9.0/24"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := a.allocate("pod"); err != nil {
			b.Fatal(err)
		}
		if err := a.release("pod"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestIPAMDropsEmptyFiles: an allocation file a machine crash left empty
// belongs to nobody; it is removed and its address becomes free again.
func TestIPAMDropsEmptyFiles(t *testing.T) {
	a, err := newIPAM(t.TempDir(), netip.MustParsePrefix("10.244.7.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"10.244.7.2", "10.244.7.3", "10.244.7.4", "10.244.7.5", "10.244.7.6"} {
		if err := os.WriteFile(filepath.Join(a.dir, ip), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ip, _, err := a.allocate("pod")
	if err != nil || !a.usable(ip) {
		t.Fatalf("allocate over empty files = %v, %v", ip, err)
	}
	held, err := a.list()
	if err != nil || len(held) != 1 {
		t.Fatalf("held = %v, %v", held, err)
	}
}
