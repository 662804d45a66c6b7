package replicaset

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

var tmplLabels = map[string]string{"app": "web", "pod-template-hash": "h1"}

// storedSet is a stored ReplicaSet at revision rev selecting app=web,
// with template labels tmpl.
func storedSet(t *testing.T, rev int64, tmpl map[string]string, minReady int32) *corev1.Unstructured {
	t.Helper()
	three := int32(3)
	rs := &apps.ReplicaSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "rs-uid"},
		Spec: apps.ReplicaSetSpec{Replicas: &three, MinReadySeconds: minReady, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl}}},
	}
	m, err := manifest.FromKube(rs)
	if err != nil {
		t.Fatal(err)
	}
	u := m.(*corev1.Unstructured)
	objects.SetRevision(u, rev)
	return u
}

func testController() *Controller {
	return &Controller{kind: objects.ReplicaSets, log: slog.New(slog.DiscardHandler), decoded: map[string]*set{}}
}

// countPods counts pods as a sync of s counts its owned pods.
func countPods(s *set, pods []*corev1.Pod) podCounts {
	var n podCounts
	fc := s.facts.begin()
	defer fc.end()
	for _, p := range pods {
		f := fc.of(p, string(s.rs.UID), s)
		if !f.active {
			if f.ref != nil && f.deleting && f.selects {
				n.terminating++
			}
			continue
		}
		n.add(p, f, s.rs.Spec.MinReadySeconds)
	}
	return n
}

func testPod(name string, ls map[string]string, readyFor time.Duration, now time.Time) *corev1.Pod {
	p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: name, Labels: ls, OwnerReferences: []*corev1.OwnerReference{{Kind: "ReplicaSet", Name: "web", Uid: "rs-uid", Controller: true}}},
		Status: &corev1.PodStatus{Phase: "Running"}}
	if readyFor > 0 {
		p.Status.Conditions = []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.New(now.Add(-readyFor))}}
	}
	return p
}

// TestCalculateStatus: the status counts the active pods, those with all
// the template's labels, the ready ones and those ready for
// minReadySeconds, and the terminating ones; a failed manage sets the
// ReplicaFailure condition.
func TestCalculateStatus(t *testing.T) {
	now := time.Now()
	s := testController().decode(storedSet(t, 1, tmplLabels, 10))
	terminating := testPod("gone", tmplLabels, 0, now)
	terminating.Metadata.DeletionTimestamp = timestamppb.New(now)
	pods := []*corev1.Pod{
		testPod("a", tmplLabels, time.Minute, now),
		testPod("b", tmplLabels, time.Second, now),
		testPod("c", tmplLabels, 0, now),
		testPod("d", map[string]string{"app": "web"}, time.Minute, now), // selected, not fully labelled
		terminating,
	}
	n := countPods(s, pods)
	st := calculateStatus(s.rs, n, nil, true, now)
	if st.Replicas != 4 || st.FullyLabeledReplicas != 3 || st.ReadyReplicas != 3 || st.AvailableReplicas != 2 ||
		st.TerminatingReplicas == nil || *st.TerminatingReplicas != 1 || len(st.Conditions) != 0 {
		t.Fatalf("status %+v, want replicas 4, fully labelled 3, ready 3, available 2, terminating 1, no condition", st)
	}
	if st := calculateStatus(s.rs, n, nil, false, now); st.TerminatingReplicas != nil {
		t.Errorf("a ReplicationController's status counts terminating pods: %d", *st.TerminatingReplicas)
	}
	if st := calculateStatus(s.rs, countPods(s, pods[:2]), errors.New("refused"), true, now); len(st.Conditions) != 1 ||
		st.Conditions[0].Type != apps.ReplicaSetReplicaFailure || st.Conditions[0].Reason != "FailedCreate" {
		t.Errorf("conditions after a failed creation: %+v", st.Conditions)
	}
	noMin := testController().decode(storedSet(t, 1, tmplLabels, 0))
	if st := calculateStatus(noMin.rs, countPods(noMin, pods), nil, true, now); st.AvailableReplicas != 3 {
		t.Errorf("without minReadySeconds, %d available, want the 3 ready", st.AvailableReplicas)
	}
}

// TestPodFacts: a sync reads a pod's facts once per stored pod: an
// update (a new pod) is read anew, the facts of pods a sync no longer
// sees are dropped, and they pass to the set's next revision unless its
// template labels (or selector) changed.
func TestPodFacts(t *testing.T) {
	now := time.Now()
	c := testController()
	s := c.decode(storedSet(t, 1, tmplLabels, 0))
	a, b := testPod("a", tmplLabels, 0, now), testPod("b", tmplLabels, 0, now)
	if n := countPods(s, []*corev1.Pod{a, b}); n.active != 2 || n.ready != 0 {
		t.Fatalf("counts %+v, want 2 active, none ready", n)
	}
	readyA := testPod("a", tmplLabels, time.Minute, now) // a's update: ready
	if n := countPods(s, []*corev1.Pod{readyA, b}); n.active != 2 || n.ready != 1 {
		t.Fatalf("counts after a became ready %+v, want 2 active, 1 ready", n)
	}
	if len(s.facts.m) != 2 {
		t.Errorf("%d pods' facts kept, want the 2 of the last sync", len(s.facts.m))
	}
	// A pod the cache holds is not read again: changing it in place
	// (which no informer does) shows in no count.
	b.Status.Conditions = []*corev1.PodCondition{{Type: "Ready", Status: "True"}}
	if n := countPods(s, []*corev1.Pod{readyA, b}); n.ready != 1 {
		t.Errorf("%d ready: a pod's facts were read again", n.ready)
	}

	// A status write: the facts pass on.
	s2 := c.decode(storedSet(t, 2, tmplLabels, 0))
	if s2 == s || s2.facts != s.facts {
		t.Error("the set's next revision, same selector and template labels, does not keep the facts")
	}
	// New template labels: fully labelled is found again.
	s3 := c.decode(storedSet(t, 3, map[string]string{"app": "web", "pod-template-hash": "h2"}, 0))
	if s3.facts == s2.facts {
		t.Fatal("a set with new template labels kept the facts")
	}
	if n := countPods(s3, []*corev1.Pod{readyA, b}); n.fully != 0 || n.active != 2 {
		t.Errorf("counts with new template labels %+v, want 2 active, none fully labelled", n)
	}
}
