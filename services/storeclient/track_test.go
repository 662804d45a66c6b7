package storeclient_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/storeclient"
)

// countingKV counts the lists of one prefix.
type countingKV struct {
	objects.KV
	prefix string
	lists  atomic.Int64
}

func (c *countingKV) List(ctx context.Context, prefix string, opts ...raftstore.ReadOption) ([]*raftstore.KV, int64, error) {
	if prefix == c.prefix {
		c.lists.Add(1)
	}
	return c.KV.List(ctx, prefix, opts...)
}

// TestWaitForRevisionWaitsForEveryHandler: WaitForRevision returns only
// once each event handler of a tracked informer has been given the
// changes up to the revision (a handler still busy with one holds it), is
// bounded by its context, reads the store once per revision to confirm an
// unchanged kind, and Revision covers the changes the informers were given.
func TestWaitForRevisionWaitsForEveryHandler(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	hooks := &admissionregistrationv1.MutatingWebhookConfiguration{}
	kv := &countingKV{KV: objectstest.New(), prefix: objects.MutatingWebhookConfigurations.Prefix("")}
	st := objects.FromKV(kv)
	put(t, st, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "a"}})

	f := storeclient.New(st)
	f.Track(hooks)
	inf := f.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()
	busy, release := make(chan struct{}, 1), make(chan struct{})
	var hold atomic.Bool
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
		if hold.Load() {
			busy <- struct{}{}
			<-release
		}
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.StartWithContext(ctx)
	defer func() { cancel(); f.Shutdown() }()
	f.WaitForCacheSync(ctx.Done())

	// Unchanged since the list: confirmed by one read, then not read again.
	rev := f.Revision()
	if rev == 0 {
		t.Fatal("Revision 0 after the list")
	}
	for range 2 {
		if err := f.WaitForRevision(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	if n := kv.lists.Load(); n != 2 { // the informer's list, and one confirmation
		t.Fatalf("%d lists, want 2", n)
	}

	// A handler busy with a new configuration holds the wait.
	hold.Store(true)
	obj := put(t, st, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	<-busy
	want := objects.Revision(obj)
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	err := f.WaitForRevision(short, want)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with a handler busy: %v, want a deadline", err)
	}
	done := make(chan error, 1)
	go func() { done <- f.WaitForRevision(ctx, want) }()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.Revision(); got < want {
		t.Fatalf("Revision %d after a change at %d", got, want)
	}
}
