package quota_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/quota"
)

func storedQuota(t *testing.T, ns, name string, hard, used k8scorev1.ResourceList) *corev1.Unstructured {
	t.Helper()
	u, err := quota.FromKube(&k8scorev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: "q-uid"},
		Spec: k8scorev1.ResourceQuotaSpec{Hard: hard}, Status: k8scorev1.ResourceQuotaStatus{Hard: hard, Used: used}})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func used(t *testing.T, ctx context.Context, st *objects.Store, ns, name string) k8scorev1.ResourceList {
	t.Helper()
	o, err := st.GetKind(ctx, objects.ResourceQuotas, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	rq, err := quota.ToKubeQuota(o.(*corev1.Unstructured))
	if err != nil {
		t.Fatal(err)
	}
	return rq.Status.Used
}

// TestAdmitTwoReplicasRace: two admission replicas, each with its own
// client of a 3-replica raft store, admit 40 ConfigMaps at once against a
// quota of 10: the compare-and-swap on the quota lets exactly 10 through
// and status.used ends at 10. Without the compare, replicas reading the
// same used would both pass.
func TestAdmitTwoReplicasRace(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	replicas := []*quota.Admission{quota.NewAdmission(objects.New(c.Client(t))), quota.NewAdmission(objects.New(c.Client(t)))}
	st := objects.New(c.Client(t))
	hard := k8scorev1.ResourceList{"count/configmaps": resource.MustParse("10")}
	if _, err := st.Create(ctx, storedQuota(t, "team", "q", hard, k8scorev1.ResourceList{"count/configmaps": resource.MustParse("0")})); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: "team"}}
			st := replicas[i%2].Admit(ctx, &corev1.UserInfo{Username: "alice"}, objects.ConfigMaps, quota.Create, cm, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case st == nil:
				admitted++
			case st.GetCode() != 403 || !strings.Contains(st.GetMessage(), "exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=10, limited: count/configmaps=10"):
				t.Errorf("c%d: %d %s", i, st.GetCode(), st.GetMessage())
			}
		})
	}
	wg.Wait()
	if admitted != 10 {
		t.Fatalf("admitted %d ConfigMaps, want exactly the quota's 10", admitted)
	}
	if got := used(t, ctx, st, "team", "q")["count/configmaps"]; got.Value() != 10 {
		t.Fatalf("status.used count/configmaps = %s, want 10", got.String())
	}
}

// TestAdmitStatusUnknown: a quota whose status.hard covers a resource
// but whose status.used does not yet refuses it, as kube's ("status
// unknown for quota"), and a namespace without quotas admits anything.
func TestAdmitStatusUnknown(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := objects.New(c.Client(t))
	q := quota.NewAdmission(st)
	u, err := quota.FromKube(&k8scorev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "team"},
		Spec:   k8scorev1.ResourceQuotaSpec{Hard: k8scorev1.ResourceList{"secrets": resource.MustParse("1")}},
		Status: k8scorev1.ResourceQuotaStatus{Hard: k8scorev1.ResourceList{"secrets": resource.MustParse("1")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "s", Namespace: "team"}}
	got := q.Admit(ctx, nil, objects.Secrets, quota.Create, sec, nil)
	if want := `secrets "s" is forbidden: status unknown for quota: q, resources: secrets`; got.GetCode() != 403 || got.GetMessage() != want {
		t.Fatalf("got %d %q, want 403 %q", got.GetCode(), got.GetMessage(), want)
	}
	sec.Metadata.Namespace = "other"
	if got := q.Admit(ctx, nil, objects.Secrets, quota.Create, sec, nil); got != nil {
		t.Fatalf("a namespace without quota: %v", got)
	}
}

// TestUsage: the controller's recount, over the store, with kube's
// evaluators: object counts, a finished pod using nothing, requests.
func TestUsage(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := objects.New(c.Client(t))
	pod := func(name, cpu, phase string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: name, Namespace: "team"},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "i",
				Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": cpu}}}}},
			Status: &corev1.PodStatus{Phase: phase}}
	}
	for _, o := range []objects.Object{
		&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "a", Namespace: "team"}},
		&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "b", Namespace: "team"}},
		&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "x", Namespace: "elsewhere"}},
		pod("run", "250m", "Running"), pod("done", "1", "Succeeded"),
	} {
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	hard := k8scorev1.ResourceList{"count/configmaps": resource.MustParse("9"), "configmaps": resource.MustParse("9"),
		"pods": resource.MustParse("9"), "requests.cpu": resource.MustParse("2")}
	rq := &k8scorev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "team"}, Spec: k8scorev1.ResourceQuotaSpec{Hard: hard}}
	gotHard, gotUsed, err := quota.Usage(ctx, st, rq)
	if err != nil {
		t.Fatal(err)
	}
	want := map[k8scorev1.ResourceName]string{"count/configmaps": "2", "configmaps": "2", "pods": "1", "requests.cpu": "250m"}
	if len(gotUsed) != len(want) || len(gotHard) != len(hard) {
		t.Fatalf("hard %v used %v, want used %v", gotHard, gotUsed, want)
	}
	for r, v := range want {
		if q := gotUsed[r]; q.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("used %s = %s, want %s", r, q.String(), v)
		}
	}
}

// TestAdmitScopes: kube's scopes pick the pods a quota counts — the
// PriorityClass scope selector, Terminating (activeDeadlineSeconds) —
// and a pod outside a full quota's scope is admitted.
func TestAdmitScopes(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := objects.New(c.Client(t))
	q := quota.NewAdmission(st)
	one := k8scorev1.ResourceList{"pods": resource.MustParse("1")}
	for _, rq := range []*k8scorev1.ResourceQuota{
		{ObjectMeta: metav1.ObjectMeta{Name: "high", Namespace: "team"}, Spec: k8scorev1.ResourceQuotaSpec{Hard: one,
			ScopeSelector: &k8scorev1.ScopeSelector{MatchExpressions: []k8scorev1.ScopedResourceSelectorRequirement{
				{ScopeName: k8scorev1.ResourceQuotaScopePriorityClass, Operator: k8scorev1.ScopeSelectorOpIn, Values: []string{"high"}}}}},
			Status: k8scorev1.ResourceQuotaStatus{Hard: one, Used: one}},
		{ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: "team"}, Spec: k8scorev1.ResourceQuotaSpec{Hard: one,
			Scopes: []k8scorev1.ResourceQuotaScope{k8scorev1.ResourceQuotaScopeTerminating}},
			Status: k8scorev1.ResourceQuotaStatus{Hard: one, Used: one}},
	} {
		u, err := quota.FromKube(rq)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	deadline := int64(60)
	for _, c := range []struct {
		name, class string
		deadline    *int64
		want        string // "" admitted
	}{
		{"p-high", "high", nil, `pods "p-high" is forbidden: exceeded quota: high, requested: pods=1, used: pods=1, limited: pods=1`},
		{"p-low", "low", nil, ""},
		{"p-job", "", &deadline, `pods "p-job" is forbidden: exceeded quota: batch, requested: pods=1, used: pods=1, limited: pods=1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: c.name, Namespace: "team"},
				Spec: &corev1.PodSpec{PriorityClassName: c.class, ActiveDeadlineSeconds: c.deadline, Containers: []*corev1.Container{{Name: "c", Image: "i"}}}}
			got := q.Admit(ctx, nil, objects.Pods, quota.Create, pod, nil)
			if got.GetMessage() != c.want {
				t.Fatalf("got %d %q, want %q", got.GetCode(), got.GetMessage(), c.want)
			}
		})
	}
}
