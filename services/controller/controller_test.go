package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

// TestOwnerMovesOnlyTheLeaversShare: the rendezvous hash gives each key
// one owner, spreads keys over the replicas, and a replica leaving moves
// only its own keys.
func TestOwnerMovesOnlyTheLeaversShare(t *testing.T) {
	three := []string{"a", "b", "c"}
	two := []string{"a", "c"}
	count := map[string]int{}
	for i := range 3000 {
		key := fmt.Sprintf("ns/rs-%d", i)
		before, after := controller.Owner(three, key), controller.Owner(two, key)
		count[before]++
		if before != "b" && after != before {
			t.Fatalf("%s moved from %s to %s though %s stayed", key, before, after, before)
		}
		if after == "b" || after == "" {
			t.Fatalf("%s owned by %q after b left", key, after)
		}
	}
	for _, r := range three {
		if count[r] < 800 || count[r] > 1200 {
			t.Errorf("replica %s owns %d of 3000 keys, want about 1000 (%v)", r, count[r], count)
		}
	}
	if controller.Owner(nil, "ns/x") != "" {
		t.Error("a key has an owner among no replicas")
	}
}

// TestPodNames: a slot's name is the same for every caller, names of one
// object's slots differ from another's, and FreeNames (and SlotNames,
// for the base and uid it was reset to) skips taken names, lowest slots
// first.
func TestPodNames(t *testing.T) {
	a0, a1 := controller.PodName("web-", "uid-a", 0), controller.PodName("web-", "uid-a", 1)
	if a0 != controller.PodName("web-", "uid-a", 0) {
		t.Fatal("a slot's name is not deterministic")
	}
	if a0 == a1 || a0 == controller.PodName("web-", "uid-b", 0) {
		t.Errorf("names collide: %s %s", a0, a1)
	}
	if len(a0) != len("web-")+5 {
		t.Errorf("name %q: want the base and five characters", a0)
	}
	long := controller.PodName(string(make([]byte, 100)), "u", 0)
	if len(long) != controller.MaxGeneratedNameLength+5 {
		t.Errorf("a long base gives a %d-character name", len(long))
	}
	taken := map[string]bool{a0: true}
	got := controller.FreeNames("web-", "uid-a", 2, func(n string) bool { return taken[n] })
	want := []string{a1, controller.PodName("web-", "uid-a", 2)}
	if !slices.Equal(got, want) {
		t.Errorf("FreeNames = %v, want %v", got, want)
	}
	var slots controller.SlotNames
	slots.Reset("web-", "uid-a")
	for range 2 { // derived, then kept
		if got := slots.Free(2, func(n string) bool { return taken[n] }); !slices.Equal(got, want) {
			t.Errorf("SlotNames.Free = %v, want %v", got, want)
		}
	}
	slots.Reset("web-", "uid-b")
	if got := slots.Free(1, func(string) bool { return false }); !slices.Equal(got, []string{controller.PodName("web-", "uid-b", 0)}) {
		t.Errorf("SlotNames.Free after a Reset to uid-b = %v", got)
	}
}

// TestSlowStart: one call first, then a growing window; a failure starts
// no more calls; proceed false stops.
func TestSlowStart(t *testing.T) {
	ctx := context.Background()
	var inFlight, peak atomic.Int32
	n, err := controller.SlowStart(ctx, 50, 8, nil, func(context.Context, int) error {
		v := inFlight.Add(1)
		for {
			p := peak.Load()
			if v <= p || peak.CompareAndSwap(p, v) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		inFlight.Add(-1)
		return nil
	})
	if n != 50 || err != nil || peak.Load() > 8 {
		t.Fatalf("SlowStart = %d, %v, peak %d: want 50, nil, at most 8 at once", n, err, peak.Load())
	}

	boom := errors.New("boom")
	var calls atomic.Int32
	n, err = controller.SlowStart(ctx, 100, 8, nil, func(context.Context, int) error {
		calls.Add(1)
		return boom
	})
	if n != 0 || !errors.Is(err, boom) || calls.Load() != 1 {
		t.Errorf("a failing first call: %d succeeded, %v, %d calls; want 0, boom, 1 call", n, err, calls.Load())
	}

	var allowed atomic.Int32
	allowed.Store(3)
	n, err = controller.SlowStart(ctx, 100, 1, func() bool { return allowed.Add(-1) >= 0 }, func(context.Context, int) error { return nil })
	if n != 3 || err != nil {
		t.Errorf("proceed false after 3: %d, %v", n, err)
	}
}

// TestSlowStartFrom: a window carried from an earlier batch starts that
// many calls at once (each call here waits for the eighth to start, which
// one call at first would never reach); the window reached is returned,
// and is 1 after a failure.
func TestSlowStartFrom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var started atomic.Int32
	all := make(chan struct{})
	n, window, err := controller.SlowStartFrom(ctx, 20, 8, 16, nil, func(ctx context.Context, i int) error {
		if started.Add(1) == 8 {
			close(all)
		}
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("call %d: the first 8 calls were not in flight at once: %w", i, ctx.Err())
		}
	})
	if n != 20 || window != 16 || err != nil {
		t.Fatalf("SlowStartFrom(20 calls, from 8, at most 16) = %d, window %d, %v; want 20, 16, nil", n, window, err)
	}

	_, window, err = controller.SlowStartFrom(ctx, 5, 100, 4, nil, func(context.Context, int) error { return nil })
	if window != 4 || err != nil {
		t.Errorf("a start above maxInFlight: window %d, %v; want 4, nil", window, err)
	}

	// Failing calls from a window of 3: the 3 start, no more after
	// (none succeeds to grow the window), and the next batch starts at 1.
	boom := errors.New("boom")
	var calls atomic.Int32
	n, window, err = controller.SlowStartFrom(ctx, 100, 3, 8, nil, func(context.Context, int) error {
		calls.Add(1)
		return boom
	})
	if n != 0 || !errors.Is(err, boom) || window != 1 || calls.Load() != 3 {
		t.Errorf("failing calls: %d succeeded of %d calls, window %d, %v; want 0 of 3, window 1, boom", n, calls.Load(), window, err)
	}
}

// TestClaimOf: kube's ClaimObject decisions.
func TestClaimOf(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"app": "web"})
	pod := func(lbl string, owner string, deleting bool) *corev1.Pod {
		md := &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"app": lbl}}
		if owner != "" {
			md.OwnerReferences = []*corev1.OwnerReference{controller.ControllerRef("apps/v1", "ReplicaSet", "rs", owner)}
		}
		if deleting {
			md.DeletionTimestamp = timestamppb.Now()
		}
		return &corev1.Pod{Metadata: md}
	}
	cases := []struct {
		name     string
		pod      *corev1.Pod
		deleting bool
		want     controller.Claim
	}{
		{"ours, matching", pod("web", "u1", false), false, controller.Owned},
		{"ours, not matching", pod("db", "u1", false), false, controller.Release},
		{"ours, not matching, we are deleted", pod("db", "u1", false), true, controller.Ignore},
		{"another's", pod("web", "u2", false), false, controller.Ignore},
		{"orphan matching", pod("web", "", false), false, controller.Adopt},
		{"orphan matching, we are deleted", pod("web", "", false), true, controller.Ignore},
		{"orphan not matching", pod("db", "", false), false, controller.Ignore},
	}
	for _, c := range cases {
		if got := controller.ClaimOf(c.pod, "u1", sel, c.deleting); got != c.want {
			t.Errorf("%s: ClaimOf = %v, want %v", c.name, got, c.want)
		}
	}
	if got := controller.ClaimOf(pod("web", "", false), "u1", labels.Everything(), false); got != controller.Ignore {
		t.Errorf("an empty selector adopts: %v", got)
	}
}

// replica is one Runner of a test controller stage over a real store.
type replica struct {
	name   string
	runner *controller.Runner
	stop   context.CancelFunc
	done   chan struct{} // closed once the replica stopped
}

func startReplica(t *testing.T, st *objects.Store, name string, keys []string, synced func(replica, key string)) *replica {
	t.Helper()
	cfg := controller.DefaultConfig("testctl", name)
	controller.FastConfig(&cfg)
	r, err := controller.New(st, cfg, func(_ context.Context, key string) error {
		synced(name, key)
		return nil
	}, func() []string { return keys })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	var infs informer.Group
	if err := r.Start(gctx, g, &infs); err != nil {
		cancel()
		t.Fatal(err)
	}
	rep := &replica{name: name, runner: r, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(rep.done)
		if err := g.Wait(); err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-rep.done
	})
	return rep
}

// TestReplicasShareKeys: replicas of a controller stage over a real store
// find each other through their Leases, each key is synced by its one
// owner, and when a replica stops (its Lease released) the others take
// its keys.
func TestReplicasShareKeys(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 1)
	st := objects.New(cl.Client(t))
	var keys []string
	for i := range 60 {
		keys = append(keys, fmt.Sprintf("ns/k%d", i))
	}
	var mu sync.Mutex
	by := map[string]map[string]bool{} // key -> replicas that synced it
	synced := func(replica, key string) {
		mu.Lock()
		defer mu.Unlock()
		if by[key] == nil {
			by[key] = map[string]bool{}
		}
		by[key][replica] = true
	}
	reps := []*replica{
		startReplica(t, st, "r1", keys, synced),
		startReplica(t, st, "r2", keys, synced),
		startReplica(t, st, "r3", keys, synced),
	}
	all := []string{"r1", "r2", "r3"}
	waitFor(t, "every replica sees the three", func() bool {
		for _, r := range reps {
			if !slices.Equal(r.runner.Members().Live(), all) {
				return false
			}
		}
		return true
	})
	for _, k := range keys {
		owners := 0
		for _, r := range reps {
			if r.runner.Owns(k) {
				owners++
				if want := controller.Owner(all, k); want != r.name {
					t.Errorf("%s owns %s, the hash gives %s", r.name, k, want)
				}
			}
		}
		if owners > 1 {
			t.Errorf("%s has %d owners", k, owners)
		}
	}

	// r2 stops: its keys move to r1 and r3, which sync them.
	mu.Lock()
	clear(by)
	mu.Unlock()
	reps[1].stop()
	<-reps[1].done
	waitFor(t, "r1 and r3 see r2 gone", func() bool {
		return slices.Equal(reps[0].runner.Members().Live(), []string{"r1", "r3"}) &&
			slices.Equal(reps[2].runner.Members().Live(), []string{"r1", "r3"})
	})
	for _, k := range keys {
		want := controller.Owner([]string{"r1", "r3"}, k)
		waitFor(t, "the new owner of "+k+" syncs it", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return by[k][want]
		})
		mu.Lock()
		if by[k]["r2"] {
			t.Errorf("%s synced by the stopped r2", k)
		}
		mu.Unlock()
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKeyRefusedDuringALapseIsSyncedAfter: a key queued while the
// replica's own Lease has lapsed (a renewal slower than RenewDeadline) is
// refused, and synced once a renewal ends the lapse, though the live set
// never changed: nothing else would queue it again before the next
// resync (none runs here).
func TestKeyRefusedDuringALapseIsSyncedAfter(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 1)
	st := objects.New(cl.Client(t))
	var offset atomic.Int64 // the replica's clock runs this far ahead
	cfg := controller.DefaultConfig("testctl", "r1")
	controller.FastConfig(&cfg)
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	var syncs atomic.Int64
	r, err := controller.New(st, cfg, func(context.Context, string) error {
		syncs.Add(1)
		return nil
	}, func() []string { return []string{"ns/k"} })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	t.Cleanup(func() {
		cancel()
		_ = g.Wait()
	})
	// Renewals as the test sees them: the lapse starts just after one,
	// once the replica saw it too, so that no recompute of the live set
	// (each renewal and its watch echo make one) notices it.
	renewed := make(chan struct{}, 1)
	leases, err := informer.NewKind(st, objects.Leases, cfg.LeaseNamespace, informer.Handlers[*corev1.Unstructured]{
		OnUpdate: func(_, _ *corev1.Unstructured) {
			select {
			case renewed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var infs informer.Group
	infs.Add(leases)
	if err := r.Start(gctx, g, &infs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first sync", func() bool { return syncs.Load() > 0 })

	// The renewal is now older than RenewDeadline on the replica's
	// clock: the key is refused until the next renewal.
	<-renewed
	<-renewed
	time.Sleep(60 * time.Millisecond)
	before := syncs.Load()
	offset.Add(int64(2 * cfg.RenewDeadline))
	r.Add("ns/k")
	waitFor(t, "the refused key synced after the lapse", func() bool { return syncs.Load() > before })
}
