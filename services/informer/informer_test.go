package informer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

func names(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
	}
	return out
}

// realStore is a one-replica raftstore for the test, and a context
// bounding it.
func realStore(t *testing.T) (*objects.Store, context.Context) {
	cl := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return objects.New(cl.Client(t)), ctx
}

// run runs inf until the test ends, when Run must return ctx's error.
func run[T objects.Object](ctx context.Context, t *testing.T, inf *informer.Informer[T]) {
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	})
}

// TestListAndWatch: against a real store, the cache lists what was there
// at start, follows creates and deletes through the watch, and List gives
// one namespace's objects or all of them, sorted by key.
func TestListAndWatch(t *testing.T) {
	st, ctx := realStore(t)
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for _, p := range []*corev1.Pod{pod("b", "y"), pod("a", "z"), pod("ab", "x")} {
		if _, err := st.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	deleted := make(chan string, 8)
	inf, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{
		OnDelete: func(p *corev1.Pod) { deleted <- p.GetMetadata().GetName() },
	})
	if err != nil {
		t.Fatal(err)
	}
	run(ctx, t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := names(inf.List("")); !slices.Equal(got, []string{"a/z", "ab/x", "b/y"}) {
		t.Errorf("List(\"\") = %v", got)
	}
	// "a" is a prefix of "ab" as a string, not as a namespace.
	if got := names(inf.List("a")); !slices.Equal(got, []string{"a/z"}) {
		t.Errorf("List(\"a\") = %v, want only namespace a", got)
	}
	if _, err := st.Create(ctx, pod("a", "w")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Delete(ctx, objects.Pods, "b", "y", 0); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "the watch to bring the changes", func() bool {
		return slices.Equal(names(inf.List("")), []string{"a/w", "a/z", "ab/x"})
	})
	if got := <-deleted; got != "y" {
		t.Errorf("OnDelete got %q, want the deleted pod y", got)
	}
	if got := names(inf.List("b")); len(got) != 0 {
		t.Errorf("List(\"b\") after the delete = %v", got)
	}
	if _, ok := inf.Get("a", "w"); !ok {
		t.Error("Get a/w: not cached")
	}
}

// TestNewMetaCachesIdentities: a NewMeta informer over a real store hands
// its handlers, and caches, pods carrying only their identity (name,
// namespace, uid, deletionTimestamp, resourceVersion), through the list
// and the watch.
func TestNewMetaCachesIdentities(t *testing.T) {
	st, ctx := realStore(t)
	full := func(name string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: name, Uid: "uid-" + name, Labels: map[string]string{"l": "v"}},
			Spec: &corev1.PodSpec{NodeName: "n1"}}
	}
	if _, err := st.Create(ctx, full("listed")); err != nil {
		t.Fatal(err)
	}
	added := make(chan *corev1.Pod, 8)
	inf, err := informer.NewMeta[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{OnAdd: func(p *corev1.Pod) { added <- p }})
	if err != nil {
		t.Fatal(err)
	}
	run(ctx, t, inf)
	if _, err := st.Create(ctx, full("watched")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		p := <-added
		md := p.GetMetadata()
		if md.GetUid() != "uid-"+md.GetName() || objects.Revision(p) == 0 || md.Labels != nil || p.Spec != nil {
			t.Errorf("pod %v: want its identity and revision alone", p)
		}
	}
}

// TestNewMetaLabelsCachesLabels: a NewMetaLabels informer over a real
// store hands its handlers pods carrying their identity and labels alone,
// through the list and the watch, and an update's old and new labels.
func TestNewMetaLabelsCachesLabels(t *testing.T) {
	st, ctx := realStore(t)
	pod := func(name, label string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: name, Uid: "uid-" + name, Labels: map[string]string{"l": label},
			Annotations: map[string]string{"x": "y"}}, Spec: &corev1.PodSpec{NodeName: "n1"}, Status: &corev1.PodStatus{Phase: "Pending"}}
	}
	if _, err := st.Create(ctx, pod("listed", "v1")); err != nil {
		t.Fatal(err)
	}
	added := make(chan *corev1.Pod, 8)
	updated := make(chan [2]*corev1.Pod, 8)
	inf, err := informer.NewMetaLabels[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod) { added <- p },
		OnUpdate: func(old, p *corev1.Pod) { updated <- [2]*corev1.Pod{old, p} },
	})
	if err != nil {
		t.Fatal(err)
	}
	run(ctx, t, inf)
	if _, err := st.Create(ctx, pod("watched", "v1")); err != nil {
		t.Fatal(err)
	}
	identityAndLabels := func(p *corev1.Pod, label string) {
		t.Helper()
		md := p.GetMetadata()
		if md.GetUid() != "uid-"+md.GetName() || objects.Revision(p) == 0 || md.GetLabels()["l"] != label || len(md.GetLabels()) != 1 ||
			md.Annotations != nil || p.Spec != nil || p.Status != nil {
			t.Errorf("pod %v: want its identity, revision and labels (l=%s) alone", p, label)
		}
	}
	for range 2 {
		identityAndLabels(<-added, "v1")
	}
	relabelled := pod("watched", "v2")
	stored, _ := inf.Get("a", "watched")
	objects.SetRevision(relabelled, objects.Revision(stored))
	if _, err := st.Update(ctx, relabelled); err != nil {
		t.Fatal(err)
	}
	u := <-updated
	identityAndLabels(u[0], "v1")
	identityAndLabels(u[1], "v2")
}

// TestNewFilteredDecodesRelevantOnly: a NewFiltered informer over a real
// store keeps in full, through the list and the watch, the pods its
// function finds relevant, and the others with their identity, labels
// and owner references alone; a pod that turns relevant on an update is
// whole from then on, and its handlers see both states.
func TestNewFilteredDecodesRelevantOnly(t *testing.T) {
	st, ctx := realStore(t)
	pod := func(name, owner string) *corev1.Pod {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: name, Uid: "uid-" + name, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"x": "y"}}, Spec: &corev1.PodSpec{NodeName: "n1"}, Status: &corev1.PodStatus{Phase: "Running"}}
		if owner != "" {
			p.Metadata.OwnerReferences = []*corev1.OwnerReference{{ApiVersion: "v1", Kind: owner, Name: "o", Uid: "o-1", Controller: true}}
		}
		return p
	}
	if _, err := st.Create(ctx, pod("listed-mine", "Mine")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, pod("listed-other", "Other")); err != nil {
		t.Fatal(err)
	}
	added := make(chan *corev1.Pod, 8)
	updated := make(chan [2]*corev1.Pod, 8)
	inf, err := informer.NewFiltered[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod) { added <- p },
		OnUpdate: func(old, p *corev1.Pod) { updated <- [2]*corev1.Pod{old, p} },
	}, func(md *corev1.ObjectMeta) bool {
		return len(md.GetOwnerReferences()) == 1 && md.GetOwnerReferences()[0].GetKind() == "Mine"
	})
	if err != nil {
		t.Fatal(err)
	}
	run(ctx, t, inf)
	if _, err := st.Create(ctx, pod("watched-mine", "Mine")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, pod("watched-other", "Other")); err != nil {
		t.Fatal(err)
	}
	check := func(p *corev1.Pod, whole bool) {
		t.Helper()
		md := p.GetMetadata()
		if md.GetUid() != "uid-"+md.GetName() || objects.Revision(p) == 0 || md.GetLabels()["app"] != "web" || len(md.GetOwnerReferences()) != 1 {
			t.Errorf("pod %v: want its identity, revision, labels and owners", p)
		}
		if got := md.Annotations != nil && p.GetSpec().GetNodeName() == "n1" && p.GetStatus().GetPhase() == "Running"; got != whole {
			t.Errorf("pod %s whole = %v, want %v: %v", md.GetName(), got, whole, p)
		}
	}
	for range 4 {
		p := <-added
		check(p, strings.HasSuffix(p.GetMetadata().GetName(), "-mine"))
	}
	adopted := pod("watched-other", "Mine")
	stored, _ := inf.Get("a", "watched-other")
	objects.SetRevision(adopted, objects.Revision(stored))
	if _, err := st.Update(ctx, adopted); err != nil {
		t.Fatal(err)
	}
	u := <-updated
	check(u[0], false)
	check(u[1], true)
	if p, _ := inf.Get("a", "watched-other"); p != u[1] {
		t.Errorf("the cache holds %v, not the update's object", p)
	}
	if _, err := informer.NewFiltered[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{}, nil); err == nil {
		t.Error("NewFiltered without a function: no error")
	}
}

// TestReuse: for a key-value Reuse's function claims, the informer caches
// and hands its handlers the function's object, not a decoding of the
// value; for the rest it decodes, and the function sees each put's key and
// revision.
func TestReuse(t *testing.T) {
	st, ctx := realStore(t)
	added := make(chan *corev1.Pod, 8)
	inf, err := informer.New[*corev1.Pod](st, "", informer.Handlers[*corev1.Pod]{OnAdd: func(p *corev1.Pod) { added <- p }})
	if err != nil {
		t.Fatal(err)
	}
	held := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: "held", Labels: map[string]string{"from": "reuse"}}}
	var revs []int64
	inf.Reuse(func(kv *raftstore.KV) (*corev1.Pod, bool) {
		revs = append(revs, kv.ModRevision)
		if kv.Key == objects.Pods.Key("a", "held") {
			return held, true
		}
		return nil, false
	})
	run(ctx, t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"held", "decoded"} {
		if _, err := st.Create(ctx, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "a", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case p := <-added:
			if (p == held) != (p.GetMetadata().GetName() == "held") {
				t.Errorf("OnAdd got %v: the held object for exactly the claimed key", p)
			}
		case <-ctx.Done():
			t.Fatal("no OnAdd")
		}
	}
	if got, _ := inf.Get("a", "held"); got != held {
		t.Errorf("cached %v, want the held object itself", got)
	}
	if got, _ := inf.Get("a", "decoded"); got == nil || got.GetMetadata().GetLabels()["from"] != "" || objects.Revision(got) == 0 {
		t.Errorf("cached %v, want the decoded pod with its revision", got)
	}
	if len(revs) != 2 || revs[0] == 0 || revs[1] <= revs[0] {
		t.Errorf("Reuse saw revisions %v, want the two puts'", revs)
	}
}

// TestGenericKind: an informer of a generic kind caches its Unstructured
// objects, and only that kind's.
func TestGenericKind(t *testing.T) {
	st, ctx := realStore(t)
	obj := func(k objects.Kind, name string) objects.Object {
		u := k.New().(*corev1.Unstructured)
		u.Metadata, u.Content = &corev1.ObjectMeta{Namespace: "ns", Name: name}, []byte(`{"spec":{}}`)
		return u
	}
	for _, o := range []objects.Object{obj(objects.Deployments, "a"), obj(objects.ReplicaSets, "b")} {
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	added := make(chan string, 4)
	inf, err := informer.NewKind(st, objects.Deployments, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(u *corev1.Unstructured) { added <- u.GetKind() + "/" + u.GetMetadata().GetName() },
	})
	if err != nil {
		t.Fatal(err)
	}
	run(ctx, t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, obj(objects.Deployments, "c")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Deployment/a", "Deployment/c"} {
		select {
		case got := <-added:
			if got != want {
				t.Fatalf("added %s, want %s", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no add of %s", want)
		}
	}
	if l := inf.List("ns"); len(l) != 2 || string(l[0].GetContent()) != `{"spec":{}}` {
		t.Fatalf("List: %v", l)
	}
	if _, err := informer.NewKind(st, objects.Pods, "", informer.Handlers[*corev1.Unstructured]{}); !errors.Is(err, objects.ErrUnknownKind) {
		t.Fatalf("NewKind(pods): %v", err)
	}
}
