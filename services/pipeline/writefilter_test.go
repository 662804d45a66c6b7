package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

func storedPod() *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "u1", Labels: map[string]string{"app": "web"}},
		Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "podflow/http:1"}}},
	}
}

func encodePod(t *testing.T, p *corev1.Pod) []byte {
	t.Helper()
	b, err := objects.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSchedulerConfinedToBinding is issue 38's raw-write attack: with the
// scheduler's own bus credentials, a store write of a pod that makes it
// privileged, gives it the host's PID namespace or another image, rebinds
// it, deletes it or creates one is refused (ErrForbidden, nothing
// applied), while the scheduler's own writes — bind, nominate, mark a
// victim terminating — pass. Red without StoreWriteFilter: StoreWriteACL
// lets the scheduler write any pod.
func TestSchedulerConfinedToBinding(t *testing.T) {
	t.Parallel()
	srv, _ := lockedDown(t)
	client := storeWithPolicy(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	admin := client(bus.RoleAdmin, "")
	sched := client(pipeline.StageRole(pipeline.Scheduler), pipeline.StageRole(pipeline.Scheduler))
	key := objects.Pods.Key("default", "web")
	pod := storedPod()
	rev, err := admin.Create(ctx, key, encodePod(t, pod))
	if err != nil {
		t.Fatal(err)
	}
	truth := true
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
	}{
		{"privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &truth}
		}},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPid = true }},
		{"another image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil/miner:1" }},
		{"bound and privileged", func(p *corev1.Pod) {
			p.Spec.NodeName = "n1"
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &truth}
		}},
		{"a label", func(p *corev1.Pod) { p.Metadata.Labels["app"] = "db" }},
	} {
		p := vt.Clone(pod)
		tc.change(p)
		if _, err := sched.Update(ctx, key, encodePod(t, p), rev); !errors.Is(err, raftstore.ErrForbidden) {
			t.Errorf("%s: the scheduler's raw write: %v, want ErrForbidden", tc.name, err)
		}
	}
	if _, err := sched.Create(ctx, objects.Pods.Key("default", "new"), encodePod(t, storedPod())); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the scheduler creates a pod: %v, want ErrForbidden", err)
	}
	if _, err := sched.Delete(ctx, key, rev); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the scheduler deletes a pod: %v, want ErrForbidden", err)
	}
	if kv, err := admin.Get(ctx, key); err != nil || kv.ModRevision != rev {
		t.Fatalf("pod after the refused writes: %v, %v; want it unchanged at revision %d", kv, err, rev)
	}

	// The scheduler's own writes: nominate (PodScheduled False), bind.
	now := timestamppb.New(time.Now())
	nominated := vt.Clone(pod)
	nominated.Status = &corev1.PodStatus{NominatedNodeName: "n1"}
	podrules.MarkPodCondition(nominated.Status, podrules.PodScheduled, podrules.ConditionFalse, "Unschedulable", "0/1 nodes", now)
	if rev, err = sched.Update(ctx, key, encodePod(t, nominated), rev); err != nil {
		t.Fatalf("the scheduler nominates a pod: %v", err)
	}
	bound := vt.Clone(nominated)
	bound.Spec.NodeName, bound.Status.NominatedNodeName = "n1", ""
	podrules.MarkPodCondition(bound.Status, podrules.PodScheduled, podrules.ConditionTrue, "", "", now)
	if rev, err = sched.Update(ctx, key, encodePod(t, bound), rev); err != nil {
		t.Fatalf("the scheduler binds a pod: %v", err)
	}
	rebound := vt.Clone(bound)
	rebound.Spec.NodeName = "n2"
	if _, err := sched.Update(ctx, key, encodePod(t, rebound), rev); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the scheduler rebinds a bound pod: %v, want ErrForbidden", err)
	}
	// The node reports it running: its conditions follow PodScheduled, out
	// of kubelet's order (as stored once the status stage added them).
	running := vt.Clone(bound)
	running.Status.Phase = "Running"
	for _, typ := range []string{podrules.PodReadyToStartContainers, podrules.PodInitialized, podrules.ContainersReady, podrules.PodReady} {
		running.Status.Conditions = append(running.Status.Conditions, &corev1.PodCondition{Type: typ, Status: podrules.ConditionTrue, LastTransitionTime: now})
	}
	if rev, err = admin.Update(ctx, key, encodePod(t, running), rev); err != nil {
		t.Fatal(err)
	}
	// A preemption's victim: marked terminating, DisruptionTarget, its
	// other conditions where they were.
	victim := vt.Clone(running)
	grace := int64(30)
	victim.Metadata.DeletionTimestamp, victim.Metadata.DeletionGracePeriodSeconds = now, &grace
	podrules.MarkPodCondition(victim.Status, "DisruptionTarget", podrules.ConditionTrue, "PreemptionByScheduler", "preempted", now)
	if _, err := sched.Update(ctx, key, encodePod(t, victim), rev); err != nil {
		t.Fatalf("the scheduler marks a victim terminating: %v", err)
	}
}

// TestStatusStageConfinedToStatus: with the status stage's credentials
// (it writes what nodes report), a store write that changes a pod's spec,
// its node, its labels, or deletes a pod not being deleted, or creates one,
// is refused; writing its status (and the applied report's sequence
// annotation) and finalizing a terminating pod pass. Red without
// StoreWriteFilter: StoreWriteACL lets the status stage write any pod.
func TestStatusStageConfinedToStatus(t *testing.T) {
	t.Parallel()
	srv, _ := lockedDown(t)
	client := storeWithPolicy(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	admin := client(bus.RoleAdmin, "")
	st := client(pipeline.StageRole(pipeline.Status), pipeline.StageRole(pipeline.Status))
	key := objects.Pods.Key("default", "web")
	pod := storedPod()
	pod.Spec.NodeName = "n1"
	rev, err := admin.Create(ctx, key, encodePod(t, pod))
	if err != nil {
		t.Fatal(err)
	}
	truth := true
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
	}{
		{"privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &truth}
		}},
		{"another node", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }},
		{"a label", func(p *corev1.Pod) { p.Metadata.Labels["app"] = "db" }},
		{"status and hostNetwork", func(p *corev1.Pod) {
			p.Status = &corev1.PodStatus{Phase: "Running"}
			p.Spec.HostNetwork = true
		}},
		{"grace 0 on a pod nobody deleted", func(p *corev1.Pod) {
			zero := int64(0)
			p.Metadata.DeletionGracePeriodSeconds = &zero
		}},
	} {
		p := vt.Clone(pod)
		tc.change(p)
		if _, err := st.Update(ctx, key, encodePod(t, p), rev); !errors.Is(err, raftstore.ErrForbidden) {
			t.Errorf("%s: the status stage's raw write: %v, want ErrForbidden", tc.name, err)
		}
	}
	if _, err := st.Delete(ctx, key, rev); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the status stage deletes a running pod: %v, want ErrForbidden", err)
	}
	if _, err := st.Create(ctx, objects.Pods.Key("default", "new"), encodePod(t, storedPod())); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the status stage creates a pod: %v, want ErrForbidden", err)
	}
	running := vt.Clone(pod)
	running.Status = &corev1.PodStatus{Phase: "Running", PodIp: "10.244.1.5"}
	podrules.SetAppliedSeq(running, 3)
	if rev, err = st.Update(ctx, key, encodePod(t, running), rev); err != nil {
		t.Fatalf("the status stage writes a pod's status: %v", err)
	}
	terminating := vt.Clone(running)
	grace := int64(30)
	terminating.Metadata.DeletionTimestamp, terminating.Metadata.DeletionGracePeriodSeconds = timestamppb.Now(), &grace
	if rev, err = admin.Update(ctx, key, encodePod(t, terminating), rev); err != nil {
		t.Fatal(err)
	}
	shorter := vt.Clone(terminating)
	five := int64(5)
	shorter.Metadata.DeletionGracePeriodSeconds = &five
	if _, err := st.Update(ctx, key, encodePod(t, shorter), rev); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the status stage changes a terminating pod's grace to 5: %v, want ErrForbidden", err)
	}
	held := vt.Clone(terminating)
	zero := int64(0)
	held.Metadata.DeletionGracePeriodSeconds = &zero
	held.Status.Phase = "Failed"
	if rev, err = st.Update(ctx, key, encodePod(t, held), rev); err != nil {
		t.Fatalf("the status stage holds a terminating pod for its finalizers (grace 0): %v", err)
	}
	if _, err := st.Delete(ctx, key, rev); err != nil {
		t.Fatalf("the status stage finalizes a terminating pod: %v", err)
	}
}

// TestNodeWritesOnlyItsOwnPodCIDR (issue 39): a node's identity may record
// a pod CIDR only for its own node. With n1's bus credentials, a store
// write that records a pod CIDR naming n2 (every other host would route
// n2's pods' traffic to n1's host), rewrites n2's record to name n1, or
// deletes it, is refused with ErrForbidden and leaves n2's record as it
// was; n1 records, rewrites and releases its own. Red without
// StoreWriteFilter's pod CIDR check: StoreWriteACL lets a node write any
// key under the pod CIDR prefix.
func TestNodeWritesOnlyItsOwnPodCIDR(t *testing.T) {
	t.Parallel()
	srv, _ := lockedDown(t)
	client := storeWithPolicy(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	n1 := client(pipeline.NodeRole("n1"), pipeline.NodeRole("n1"))
	n2 := client(pipeline.NodeRole("n2"), pipeline.NodeRole("n2"))
	n2Key := pipeline.PodCIDRPrefix + "10.244.2.0-24"
	n2Rev, err := n2.Create(ctx, n2Key, []byte("n2"))
	if err != nil {
		t.Fatalf("n2 records its own pod CIDR: %v", err)
	}

	if _, err := n1.Create(ctx, pipeline.PodCIDRPrefix+"10.244.3.0-24", []byte("n2")); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("n1 records a pod CIDR naming n2: %v, want ErrForbidden", err)
	}
	if _, err := n1.Update(ctx, n2Key, []byte("n1"), n2Rev); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("n1 takes n2's pod CIDR: %v, want ErrForbidden", err)
	}
	if _, err := n1.Delete(ctx, n2Key, n2Rev); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("n1 deletes n2's pod CIDR: %v, want ErrForbidden", err)
	}
	if kv, err := n2.Get(ctx, n2Key); err != nil || string(kv.Value) != "n2" || kv.ModRevision != n2Rev {
		t.Fatalf("n2's pod CIDR after n1's writes: %v, %v; want it unchanged at revision %d", kv, err, n2Rev)
	}
	if _, err := n1.Get(ctx, pipeline.PodCIDRPrefix+"10.244.3.0-24"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("the pod CIDR n1 recorded for n2: %v, want ErrNotFound", err)
	}

	// n1's own: recorded, rewritten, released.
	own := pipeline.PodCIDRPrefix + "10.244.1.0-24"
	rev, err := n1.Create(ctx, own, []byte("n1"))
	if err != nil {
		t.Fatalf("n1 records its own pod CIDR: %v", err)
	}
	if rev, err = n1.Update(ctx, own, []byte("n1"), rev); err != nil {
		t.Fatalf("n1 rewrites its own pod CIDR: %v", err)
	}
	if _, err := n1.Delete(ctx, own, rev); err != nil {
		t.Fatalf("n1 releases its own pod CIDR: %v", err)
	}
}
