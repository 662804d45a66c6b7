package daemonset_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
	"github.com/podflow/podflow/services/stages/daemonset"
)

// storeRequester stands in for the pipeline's api, admission and
// persistence stages: it stores the requested pod if its name is free (a
// 409 otherwise), as persistence does, and counts the creations.
type storeRequester struct {
	st *objects.Store

	mu      sync.Mutex
	created int
}

func (r *storeRequester) Request(ctx context.Context, _ string, data []byte) ([]byte, error) {
	e := &eventsv1.Envelope{}
	if err := proto.Unmarshal(data, e); err != nil {
		return nil, err
	}
	pod := e.GetPodRequested().GetPod()
	pod.Metadata.Uid = uuid.NewString()
	pod.Metadata.CreationTimestamp = timestamppb.Now()
	resp := &apiv1.Response{}
	if _, err := r.st.Create(ctx, pod); errors.Is(err, raftstore.ErrAlreadyExists) {
		resp.Status = stage.AlreadyExists("pods", pod.Metadata.Name)
	} else if err != nil {
		return nil, err
	} else {
		r.mu.Lock()
		r.created++
		r.mu.Unlock()
		resp.Status = stage.Success(201, "Pod", pod.Metadata.Name)
		if resp.Object, err = proto.Marshal(pod); err != nil {
			return nil, err
		}
	}
	return proto.Marshal(resp)
}

func (r *storeRequester) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created
}

type harness struct {
	t   *testing.T
	st  *objects.Store
	req *storeRequester
}

func newHarness(t *testing.T) *harness {
	cl := raftstoretest.MakeCluster(t, 1)
	st := objects.New(cl.Client(t))
	return &harness{t: t, st: st, req: &storeRequester{st: st}}
}

// replica starts a replica of the controller until the test ends.
func (h *harness) replica(ctx context.Context, name string) {
	h.t.Helper()
	cfg := daemonset.DefaultConfig(name)
	controller.FastConfig(&cfg.Controller)
	env := stage.Env{Pub: &stagetest.Publisher{}, Store: h.st, Stage: pipeline.DaemonSet, Replica: name}
	c, err := daemonset.New(env, cfg, h.req)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	if err := c.Start(gctx, g); err != nil {
		h.t.Fatal(err)
	}
	if err := c.Reconcile(gctx); err != nil {
		h.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = g.Wait(); close(done) }()
	h.t.Cleanup(func() { cancel(); <-done })
}

func (h *harness) node(ctx context.Context, name string, labels map[string]string, taints ...*corev1.Taint) {
	h.t.Helper()
	n := &corev1.Node{Metadata: &corev1.ObjectMeta{Name: name, Uid: uuid.NewString(), Labels: labels}, Spec: &corev1.NodeSpec{Taints: taints}}
	if _, err := h.st.Create(ctx, n); err != nil {
		h.t.Fatal(err)
	}
}

// createDS stores ds as the api server would (kube's DaemonSet strategy
// and defaults: uid, generation, the template generation annotation) and
// returns it as stored.
func (h *harness) createDS(ctx context.Context, ds *apps.DaemonSet) *apps.DaemonSet {
	h.t.Helper()
	ds.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}
	ds.UID = types.UID(uuid.NewString())
	ds.Generation = 1
	ds.CreationTimestamp = metav1.Now()
	if ds.Namespace == "" {
		ds.Namespace = "default"
	}
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": ds.Name}}
	ds.Spec.Template.Labels = map[string]string{"app": ds.Name}
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		ds.Spec.Template.Spec.Containers = []v1.Container{{Name: "c", Image: "busybox"}}
	}
	if ds.Spec.RevisionHistoryLimit == nil {
		ds.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	}
	if ds.Spec.UpdateStrategy.Type == "" {
		one := intstr.FromInt32(1)
		ds.Spec.UpdateStrategy = apps.DaemonSetUpdateStrategy{Type: apps.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &apps.RollingUpdateDaemonSet{MaxUnavailable: &one}}
	}
	m, err := manifest.FromKube(ds)
	if err != nil {
		h.t.Fatal(err)
	}
	u := m.(*corev1.Unstructured)
	if _, st := registry.Default().PrepareCreate(ctx, admin, "", u); st != nil {
		h.t.Fatalf("create %s: %v", ds.Name, st)
	}
	if _, err := h.st.Create(ctx, u); err != nil {
		h.t.Fatal(err)
	}
	return h.getDS(ctx, ds.Namespace, ds.Name)
}

// admin is the user the tests' own writes are made as (kubectl's).
var admin = &corev1.UserInfo{Username: "admin", Groups: []string{"system:masters", "system:authenticated"}}

func (h *harness) getDS(ctx context.Context, ns, name string) *apps.DaemonSet {
	h.t.Helper()
	o, err := h.st.GetKind(ctx, objects.DaemonSets, ns, name)
	if err != nil {
		h.t.Fatal(err)
	}
	k, err := manifest.ToKube(o)
	if err != nil {
		h.t.Fatal(err)
	}
	return k.(*apps.DaemonSet)
}

// mutateDS changes the stored DaemonSet (a user's update: generation
// bumped).
func (h *harness) mutateDS(ctx context.Context, ns, name string, f func(*apps.DaemonSet)) {
	h.t.Helper()
	for {
		o, err := h.st.GetKind(ctx, objects.DaemonSets, ns, name)
		if err != nil {
			h.t.Fatal(err)
		}
		k, err := manifest.ToKube(o)
		if err != nil {
			h.t.Fatal(err)
		}
		ds := k.(*apps.DaemonSet)
		f(ds)
		m, err := manifest.FromKube(ds)
		if err != nil {
			h.t.Fatal(err)
		}
		u := m.(*corev1.Unstructured)
		u.Metadata.ResourceVersion = o.GetMetadata().GetResourceVersion()
		if _, st := registry.Default().PrepareUpdate(ctx, admin, "", u, o.(*corev1.Unstructured)); st != nil {
			h.t.Fatalf("update %s: %v", name, st)
		}
		objects.SetRevision(u, objects.Revision(o))
		if _, err := h.st.Update(ctx, u); errors.Is(err, raftstore.ErrConflict) {
			continue
		} else if err != nil {
			h.t.Fatal(err)
		}
		return
	}
}

// podsByNode returns the live pods of ns by the node their node affinity
// names.
func (h *harness) podsByNode(ctx context.Context, ns string) map[string][]*corev1.Pod {
	h.t.Helper()
	ps, _, err := objects.List[*corev1.Pod](ctx, h.st, ns)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string][]*corev1.Pod{}
	for _, p := range ps {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		out[targetNode(p)] = append(out[targetNode(p)], p)
	}
	return out
}

func targetNode(p *corev1.Pod) string {
	for _, t := range p.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution().GetNodeSelectorTerms() {
		for _, f := range t.GetMatchFields() {
			if f.GetKey() == "metadata.name" && f.GetOperator() == "In" && len(f.GetValues()) == 1 {
				return f.GetValues()[0]
			}
		}
	}
	return ""
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached; last: %s", what, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func nodesOf(m map[string][]*corev1.Pod) string {
	var out []string
	for n, ps := range m {
		out = append(out, fmt.Sprintf("%s:%d", n, len(ps)))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestOnePodPerEligibleNode: a pod for each node the DaemonSet's
// nodeSelector matches and whose taints its pods tolerate, bound by node
// affinity, with kube's default daemon tolerations, named after the
// DaemonSet, node and template hash; a node added gets one, a node
// tainted NoExecute loses its pod, a node removed too; the status counts
// as kube's. Two replicas of the controller make exactly one pod per node.
func TestOnePodPerEligibleNode(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.node(ctx, "a", map[string]string{"disk": "ssd"})
	h.node(ctx, "b", map[string]string{"disk": "ssd"})
	h.node(ctx, "c", map[string]string{"disk": "hdd"})
	h.node(ctx, "d", map[string]string{"disk": "ssd"}, &corev1.Taint{Key: "dedicated", Value: "db", Effect: "NoSchedule"})
	h.node(ctx, "e", map[string]string{"disk": "ssd"}, &corev1.Taint{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"})
	h.replica(ctx, "r1")
	h.replica(ctx, "r2")
	ds := h.createDS(ctx, &apps.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: apps.DaemonSetSpec{Template: v1.PodTemplateSpec{Spec: v1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"}}}}})

	// a, b and e (its taint is one of kube's default daemon tolerations).
	eventually(t, "pods on a, b and e", func() (bool, string) {
		got := nodesOf(h.podsByNode(ctx, "default"))
		return got == "a:1 b:1 e:1", got
	})
	eventually(t, "status", func() (bool, string) {
		st := h.getDS(ctx, "default", "agent").Status
		return st.DesiredNumberScheduled == 3 && st.CurrentNumberScheduled == 3 && st.UpdatedNumberScheduled == 3 &&
			st.NumberReady == 0 && st.NumberAvailable == 0 && st.NumberUnavailable == 3 && st.ObservedGeneration == 1, fmt.Sprintf("%+v", st)
	})
	if n := h.req.count(); n != 3 {
		t.Errorf("%d creations asked and made, want 3 (two replicas)", n)
	}
	for node, ps := range h.podsByNode(ctx, "default") {
		p := ps[0]
		md := p.GetMetadata()
		h := md.GetLabels()[apps.DefaultDaemonSetUniqueLabelKey]
		if want := daemonset.PodName("agent", string(ds.UID), node, h, 0); md.GetName() != want || h == "" {
			t.Errorf("pod %s on %s (hash %q), want the name %s", md.GetName(), node, h, want)
		}
		if ref := controller.ControllerOf(md); ref == nil || ref.GetKind() != "DaemonSet" || ref.GetUid() != string(ds.UID) {
			t.Errorf("pod %s: controller %v", md.GetName(), ref)
		}
		var keys []string
		for _, tol := range p.GetSpec().GetTolerations() {
			keys = append(keys, tol.GetKey()+":"+tol.GetEffect())
		}
		for _, want := range []string{"node.kubernetes.io/not-ready:NoExecute", "node.kubernetes.io/unreachable:NoExecute",
			"node.kubernetes.io/disk-pressure:NoSchedule", "node.kubernetes.io/memory-pressure:NoSchedule",
			"node.kubernetes.io/pid-pressure:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule"} {
			if !slices.Contains(keys, want) {
				t.Errorf("pod %s tolerations %v lack %s", md.GetName(), keys, want)
			}
		}
	}

	// A node added gets its pod.
	h.node(ctx, "f", map[string]string{"disk": "ssd"})
	eventually(t, "a pod on f", func() (bool, string) {
		got := nodesOf(h.podsByNode(ctx, "default"))
		return got == "a:1 b:1 e:1 f:1", got
	})

	// A NoExecute taint the pods do not tolerate evicts b's pod.
	if _, err := objects.Mutate(ctx, h.st, "", "b", func(n *corev1.Node) error {
		n.Spec.Taints = append(n.Spec.Taints, &corev1.Taint{Key: "maintenance", Effect: "NoExecute"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's pod gone", func() (bool, string) {
		got := nodesOf(h.podsByNode(ctx, "default"))
		return got == "a:1 e:1 f:1", got
	})

	// A node removed: its pod goes, bound (node agent gone: deleted at
	// once, as kube's PodGC) or not.
	if _, err := objects.Mutate(ctx, h.st, "default", h.podsByNode(ctx, "default")["f"][0].GetMetadata().GetName(), func(p *corev1.Pod) error {
		p.Spec.NodeName = "f"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"e", "f"} {
		if _, err := h.st.Delete(ctx, objects.Nodes, "", n, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "e's and f's pods gone", func() (bool, string) {
		ps, _, _ := objects.List[*corev1.Pod](ctx, h.st, "default")
		var names []string
		for _, p := range ps {
			names = append(names, targetNode(p))
		}
		slices.Sort(names)
		return strings.Join(names, " ") == "a", strings.Join(names, " ")
	})
	eventually(t, "status after", func() (bool, string) {
		st := h.getDS(ctx, "default", "agent").Status
		return st.DesiredNumberScheduled == 1 && st.CurrentNumberScheduled == 1 && st.NumberMisscheduled == 0, fmt.Sprintf("%+v", st)
	})
}

// TestRollingUpdateAndHistory: a template change makes a second
// ControllerRevision (revision 2) and replaces the pods (old ones not
// available go at once, kube's allowedReplacementPods); a change back
// reuses revision 1's ControllerRevision as revision 3; OnDelete replaces
// nothing until a pod is deleted.
func TestRollingUpdateAndHistory(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.node(ctx, "a", nil)
	h.node(ctx, "b", nil)
	h.replica(ctx, "r1")
	h.createDS(ctx, &apps.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}})
	images := func() string {
		var out []string
		for node, ps := range h.podsByNode(ctx, "default") {
			for _, p := range ps {
				out = append(out, node+"="+p.GetSpec().GetContainers()[0].GetImage())
			}
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	revisions := func() string {
		crs, _, err := h.st.ListKind(ctx, objects.ControllerRevisions, "default")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range crs {
			k, err := manifest.ToKube(o)
			if err != nil {
				t.Fatal(err)
			}
			cr := k.(*apps.ControllerRevision)
			out = append(out, fmt.Sprintf("%d", cr.Revision))
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	eventually(t, "first pods", func() (bool, string) { got := images(); return got == "a=busybox b=busybox", got })
	h.mutateDS(ctx, "default", "agent", func(ds *apps.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "busybox:1.36" })
	eventually(t, "rolled out", func() (bool, string) {
		got := images()
		return got == "a=busybox:1.36 b=busybox:1.36", got + "\n" + h.dump(ctx)
	})
	eventually(t, "two revisions", func() (bool, string) { got := revisions(); return got == "1 2", got })
	h.mutateDS(ctx, "default", "agent", func(ds *apps.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "busybox" })
	eventually(t, "rolled back", func() (bool, string) { got := images(); return got == "a=busybox b=busybox", got })
	eventually(t, "revision 1 is now 3", func() (bool, string) { got := revisions(); return got == "2 3", got })

	// OnDelete: a template change replaces a pod only once it is deleted.
	h.mutateDS(ctx, "default", "agent", func(ds *apps.DaemonSet) {
		ds.Spec.UpdateStrategy = apps.DaemonSetUpdateStrategy{Type: apps.OnDeleteDaemonSetStrategyType}
		ds.Spec.Template.Spec.Containers[0].Image = "busybox:1.37"
	})
	eventually(t, "observed", func() (bool, string) {
		ds := h.getDS(ctx, "default", "agent")
		return ds.Status.ObservedGeneration == ds.Generation, fmt.Sprintf("%d/%d", ds.Status.ObservedGeneration, ds.Generation)
	})
	time.Sleep(300 * time.Millisecond) // a rolling update would have deleted a pod by now
	if got := images(); got != "a=busybox b=busybox" {
		t.Fatalf("OnDelete replaced pods on its own: %s", got)
	}
	if st := h.getDS(ctx, "default", "agent").Status; st.UpdatedNumberScheduled != 0 {
		t.Errorf("updatedNumberScheduled %d, want 0", st.UpdatedNumberScheduled)
	}
	a := h.podsByNode(ctx, "default")["a"][0].GetMetadata().GetName()
	if _, err := h.st.Delete(ctx, objects.Pods, "default", a, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a replaced", func() (bool, string) { got := images(); return got == "a=busybox:1.37 b=busybox", got })
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*daemonset.Config)
		ok     bool
	}{
		{"defaults", func(*daemonset.Config) {}, true},
		{"another stage", func(c *daemonset.Config) { c.Controller.Stage = pipeline.ReplicaSet }, false},
		{"no burst", func(c *daemonset.Config) { c.BurstReplicas = 0 }, false},
		{"no window", func(c *daemonset.Config) { c.MaxInFlight = 0 }, false},
		{"no backoff", func(c *daemonset.Config) { c.FailedPodBackoff = 0 }, false},
		{"max below base", func(c *daemonset.Config) { c.FailedPodMaxBackoff = time.Millisecond }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := daemonset.DefaultConfig("r")
			tc.mutate(&cfg)
			if err := cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestPodName(t *testing.T) {
	a := daemonset.PodName("agent", "uid", "node-a", "hash", 0)
	if a != daemonset.PodName("agent", "uid", "node-a", "hash", 0) || !strings.HasPrefix(a, "agent-") || len(a) != len("agent-")+5 {
		t.Fatalf("PodName: %q", a)
	}
	seen := map[string]bool{a: true}
	for _, o := range []string{daemonset.PodName("agent", "uid", "node-b", "hash", 0), daemonset.PodName("agent", "uid", "node-a", "hash2", 0),
		daemonset.PodName("agent", "uid", "node-a", "hash", 1), daemonset.PodName("agent", "uid2", "node-a", "hash", 0)} {
		if seen[o] {
			t.Errorf("PodName: %q twice", o)
		}
		seen[o] = true
	}
}

func (h *harness) dump(ctx context.Context) string {
	var b strings.Builder
	ds := h.getDS(ctx, "default", "agent")
	fmt.Fprintf(&b, "ds gen %d image %s annotations %v status %+v\n", ds.Generation, ds.Spec.Template.Spec.Containers[0].Image, ds.Annotations, ds.Status)
	crs, _, _ := h.st.ListKind(ctx, objects.ControllerRevisions, "default")
	for _, o := range crs {
		k, _ := manifest.ToKube(o)
		cr := k.(*apps.ControllerRevision)
		fmt.Fprintf(&b, "cr %s rev %d labels %v\n", cr.Name, cr.Revision, cr.Labels)
	}
	ps, _, _ := objects.List[*corev1.Pod](ctx, h.st, "default")
	for _, p := range ps {
		fmt.Fprintf(&b, "pod %s labels %v del %v\n", p.GetMetadata().GetName(), p.GetMetadata().GetLabels(), p.GetMetadata().GetDeletionTimestamp())
	}
	return b.String()
}

// kubelet stands in for the nodes: every live pod of ns not yet ready is
// made Running and Ready 100ms after its creation (Failed instead if
// failed(pod)), until ctx ends.
func (h *harness) kubelet(ctx context.Context, ns string, failed func(*corev1.Pod) bool) {
	go func() {
		for ctx.Err() == nil {
			ps, _, err := objects.List[*corev1.Pod](ctx, h.st, ns)
			if err != nil {
				continue
			}
			for _, p := range ps {
				if p.GetMetadata().GetDeletionTimestamp() != nil || p.GetStatus().GetPhase() != "" ||
					time.Since(p.GetMetadata().GetCreationTimestamp().AsTime()) < 100*time.Millisecond {
					continue // a pod takes 100ms to start, so a rollout's steps can be seen
				}
				_, _ = objects.Mutate(ctx, h.st, ns, p.GetMetadata().GetName(), func(p *corev1.Pod) error {
					if p.Status == nil {
						p.Status = &corev1.PodStatus{}
					}
					if p.Status.Phase != "" {
						return objects.ErrNoChange
					}
					if failed != nil && failed(p) {
						p.Status.Phase = "Failed"
						return nil
					}
					now := timestamppb.Now()
					p.Status.Phase = "Running"
					p.Status.StartTime = now
					p.Status.Conditions = []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: now}}
					return nil
				})
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// TestSurgeKeepsEveryNodeServed: with maxSurge 1 and maxUnavailable 0, a
// rolling update starts each new pod beside the old one and deletes the
// old one only once the new one is available: at every observed step
// each node has an available pod and at most one new pod beside an old
// one is not yet available.
func TestSurgeKeepsEveryNodeServed(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	for _, n := range []string{"a", "b", "c"} {
		h.node(ctx, n, nil)
	}
	h.kubelet(ctx, "default", nil)
	h.replica(ctx, "r1")
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	h.createDS(ctx, &apps.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Spec: apps.DaemonSetSpec{
		UpdateStrategy: apps.DaemonSetUpdateStrategy{Type: apps.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &apps.RollingUpdateDaemonSet{MaxSurge: &one, MaxUnavailable: &zero}}}})
	eventually(t, "three available pods", func() (bool, string) {
		st := h.getDS(ctx, "default", "agent").Status
		return st.NumberAvailable == 3 && st.UpdatedNumberScheduled == 3, fmt.Sprintf("%+v", st)
	})
	h.mutateDS(ctx, "default", "agent", func(ds *apps.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "busybox:1.36" })
	deadline := time.Now().Add(30 * time.Second)
	for {
		byNode := h.podsByNode(ctx, "default")
		surging, updated := 0, 0
		for _, n := range []string{"a", "b", "c"} {
			ready, waiting := 0, 0
			for _, p := range byNode[n] {
				running := p.GetStatus().GetPhase() == "Running"
				if running {
					ready++
				} else if len(byNode[n]) > 1 {
					waiting++ // a new pod beside an old one, not yet available
				}
				if p.GetSpec().GetContainers()[0].GetImage() == "busybox:1.36" && running && len(byNode[n]) == 1 {
					updated++
				}
			}
			if ready == 0 {
				t.Fatalf("node %s has no available pod: %s", n, nodesOf(byNode))
			}
			surging += waiting
		}
		if surging > 1 {
			t.Fatalf("%d surge pods not yet available at once (maxSurge 1): %s", surging, nodesOf(byNode))
		}
		if updated == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout not done: %s\n%s", nodesOf(byNode), h.dump(ctx))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFailedPodReplaced: a daemon pod that fails is deleted and replaced
// (kube's upstream "should retry creating failed daemon pods"), under a
// name of its own even though the failed pod is gone at once (it has no
// node here): the upstream test waits for the failed pod's name to be
// gone.
func TestFailedPodReplaced(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t)
	h.node(ctx, "a", nil)
	var mu sync.Mutex
	var failedUID, failedName string
	h.kubelet(ctx, "default", func(p *corev1.Pod) bool {
		mu.Lock()
		defer mu.Unlock()
		if failedUID == "" {
			failedUID, failedName = p.GetMetadata().GetUid(), p.GetMetadata().GetName()
		}
		return failedUID == p.GetMetadata().GetUid()
	})
	h.replica(ctx, "r1")
	h.createDS(ctx, &apps.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}})
	eventually(t, "a running replacement", func() (bool, string) {
		ps := h.podsByNode(ctx, "default")["a"]
		if len(ps) != 1 || ps[0].GetStatus().GetPhase() != "Running" {
			return false, nodesOf(h.podsByNode(ctx, "default"))
		}
		mu.Lock()
		defer mu.Unlock()
		return ps[0].GetMetadata().GetUid() != failedUID, ps[0].GetMetadata().GetUid()
	})
	mu.Lock()
	defer mu.Unlock()
	if name := h.podsByNode(ctx, "default")["a"][0].GetMetadata().GetName(); name == failedName {
		t.Errorf("the replacement is named %q, as the failed pod was", name)
	}
	if n := h.req.count(); n != 2 {
		t.Errorf("%d pods created, want 2 (the failed one and its replacement)", n)
	}
}
