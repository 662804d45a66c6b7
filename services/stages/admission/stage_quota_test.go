package admission

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/quota"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// quotaFirstKV is a store whose lists of LimitRanges are answered only
// once the quotas' read has started (started closed), or fail.
type quotaFirstKV struct {
	*objectstest.KV
	started chan struct{}
}

func (k quotaFirstKV) List(ctx context.Context, prefix string, opts ...raftstore.ReadOption) ([]*raftstore.KV, int64, error) {
	if strings.HasPrefix(prefix, objects.LimitRanges.Prefix("")) {
		select {
		case <-k.started:
		case <-ctx.Done():
			return nil, 0, errors.New("the LimitRanges were read before the quotas' read started")
		}
	}
	return k.KV.List(ctx, prefix, opts...)
}

// startedReads is a QuotaReader that says when a read starts.
type startedReads struct {
	*quota.Admission
	once    sync.Once
	started chan struct{}
}

func (r *startedReads) Read(ctx context.Context, ns string) ([]objects.Object, error) {
	r.once.Do(func() { close(r.started) })
	return r.Admission.Read(ctx, ns)
}

// TestQuotaReadBesideLimitRanges: the stage reads a pod's quotas while it
// reads its LimitRanges, not after (a pod waits for one store read, not
// two in a row), and the quota read so is the one charged: a quota of
// one pod, used, refuses the pod.
func TestQuotaReadBesideLimitRanges(t *testing.T) {
	env, pub, base := stagetest.NewEnv("admission")
	started := make(chan struct{})
	env.Store = objects.FromKV(quotaFirstKV{KV: base, started: started})
	ctx := context.Background()
	ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "team", Uid: "ns-team"}, Status: &corev1.NamespaceStatus{Phase: "Active"}}
	if _, err := env.Store.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	one := k8scorev1.ResourceList{"pods": resource.MustParse("1")}
	rq, err := quota.FromKube(&k8scorev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "team", UID: "q-uid"},
		Spec: k8scorev1.ResourceQuotaSpec{Hard: one}, Status: k8scorev1.ResourceQuotaStatus{Hard: one, Used: one}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Create(ctx, rq); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Quota = &startedReads{Admission: quota.NewAdmission(env.Store), started: started}
	s, err := NewStage(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stagetest.Start(t, s.Start)
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "team", Uid: "u"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}
	d := stagetest.Deliver(env, &eventsv1.Envelope{RequestId: "r", Namespace: "team", PodName: "p", PodUid: "u",
		Payload: &eventsv1.Envelope_PodAuthorized{PodAuthorized: &eventsv1.PodAuthorized{Pod: pod}}})
	if err := s.Handle(ctx, d); err != nil {
		t.Fatal(err)
	}
	evs := pub.Events()
	if len(evs) != 1 || evs[0].GetPodRejected() == nil {
		t.Fatalf("published %v, want PodRejected", pub.Types())
	}
	st := evs[0].GetPodRejected().GetStatus()
	if st.GetCode() != 403 || !strings.Contains(st.GetMessage(), "exceeded quota: q") {
		t.Errorf("rejected with %d %q, want 403 exceeded quota: q", st.GetCode(), st.GetMessage())
	}
}
