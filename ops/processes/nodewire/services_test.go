package nodewire

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// recorder is a ServiceSyncer that keeps what it was last given.
type recorder struct {
	mu     sync.Mutex
	svcs   []*corev1.Service
	slices []*corev1.EndpointSlice
	calls  int
}

func (r *recorder) Sync(_ context.Context, svcs []*corev1.Service, slices []*corev1.EndpointSlice) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.svcs, r.slices = svcs, slices
	r.calls++
	return true, nil
}

func (r *recorder) wait(t *testing.T, what string, ok func(svcs []*corev1.Service, slices []*corev1.EndpointSlice) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second) // the "within a second"
	for time.Now().Before(deadline) {
		r.mu.Lock()
		done := ok(r.svcs, r.slices)
		r.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("within a second: %s", what)
}

// TestWatchServices: a Service, then its slice, then a slice change and a
// deletion reach the syncer within a second, each.
func TestWatchServices(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{}
	var lat []time.Duration
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- WatchServices(ctx, st, r, ServiceWatchConfig{OnSync: func(d time.Duration) { mu.Lock(); lat = append(lat, d); mu.Unlock() }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchServices = %v", err)
		}
	}()
	r.wait(t, "the first sync", func(s []*corev1.Service, _ []*corev1.EndpointSlice) bool { return r.calls > 0 })

	svc := &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.10"}}
	if _, err := st.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the Service", func(s []*corev1.Service, _ []*corev1.EndpointSlice) bool { return len(s) == 1 })
	slice := &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web-1"}, Endpoints: []*corev1.Endpoint{
		{Addresses: []string{"10.244.1.11"}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(true)}}}}
	if _, err := st.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the slice", func(_ []*corev1.Service, e []*corev1.EndpointSlice) bool { return len(e) == 1 })
	slice.Endpoints[0].Conditions.Ready = proto.Bool(false)
	if _, err := st.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the slice change", func(_ []*corev1.Service, e []*corev1.EndpointSlice) bool {
		return len(e) == 1 && !e[0].GetEndpoints()[0].GetConditions().GetReady()
	})
	if _, err := st.Delete(ctx, objects.Services, "default", "web", 0); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the deletion", func(s []*corev1.Service, _ []*corev1.EndpointSlice) bool { return len(s) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(lat) < 4 {
		t.Errorf("OnSync told %d times, want at least 4", len(lat))
	}
}

// syncFunc is a ServiceSyncer of one function.
type syncFunc func() (bool, error)

func (f syncFunc) Sync(context.Context, []*corev1.Service, []*corev1.EndpointSlice) (bool, error) {
	return f()
}

func TestSyncers(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	ret := func(changed bool, err error) syncFunc { return func() (bool, error) { return changed, err } }
	tests := []struct {
		name    string
		ss      Syncers
		changed bool
		errs    []error
	}{
		{"none", nil, false, nil},
		{"one changed", Syncers{ret(false, nil), ret(true, nil)}, true, nil},
		{"nothing changed", Syncers{ret(false, nil), ret(false, nil)}, false, nil},
		{"every error, every syncer called", Syncers{ret(false, errA), ret(true, errB)}, true, []error{errA, errB}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			changed, err := tc.ss.Sync(context.Background(), nil, nil)
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if (err != nil) != (len(tc.errs) > 0) {
				t.Errorf("err = %v, want %v", err, tc.errs)
			}
			for _, e := range tc.errs {
				if !errors.Is(err, e) {
					t.Errorf("err = %v, want it to hold %v", err, e)
				}
			}
		})
	}
}
