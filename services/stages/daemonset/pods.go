package daemonset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"
	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/controller/daemon/util"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/objects"
)

// kubePod is controller.KubePod with what the DaemonSet controller reads
// besides: the required node affinity's node-name term, which names the
// node of a daemon pod not yet bound (kube's util.GetTargetNodeName).
func kubePod(p *corev1.Pod) *v1.Pod {
	kp := controller.KubePod(p)
	if kp.Spec.NodeName != "" {
		return kp
	}
	req := p.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
	if req == nil {
		return kp
	}
	sel := &v1.NodeSelector{}
	for _, t := range req.GetNodeSelectorTerms() {
		var term v1.NodeSelectorTerm
		for _, f := range t.GetMatchFields() {
			term.MatchFields = append(term.MatchFields, v1.NodeSelectorRequirement{Key: f.GetKey(),
				Operator: v1.NodeSelectorOperator(f.GetOperator()), Values: f.GetValues()})
		}
		sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, term)
	}
	kp.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}}
	return kp
}

// getDaemonPods is kube's: the pods ds controls, adopting the orphans its
// selector matches (after a fresh read shows ds is not being deleted) and
// releasing its own that no longer match, as kube's
// PodControllerRefManager.ClaimPods decides (controller.ClaimOf). Each
// write is compared on the pod's revision and expected by the sync.
func (dsc *Controller) getDaemonPods(ctx context.Context, ds *apps.DaemonSet) ([]*v1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	ref := dsc.controllerRef(ds)
	var out []*v1.Pod
	var errs []error
	checked, canAdopt := false, false
	for _, p := range dsc.podInf.List(ds.Namespace) {
		md := p.GetMetadata()
		switch controller.ClaimOf(p, string(ds.UID), sel, ds.DeletionTimestamp != nil) {
		case controller.Owned:
			out = append(out, kubePod(p))
		case controller.Adopt:
			if !checked {
				checked = true
				fresh, err := dsc.kubeClient.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
				switch {
				case err != nil:
					errs = append(errs, err)
				case fresh.UID != ds.UID:
					errs = append(errs, fmt.Errorf("original DaemonSet %v/%v is gone: got uid %v, wanted %v", ds.Namespace, ds.Name, fresh.UID, ds.UID))
				case fresh.DeletionTimestamp != nil:
					errs = append(errs, fmt.Errorf("%v/%v has just been deleted at %v", ds.Namespace, ds.Name, fresh.DeletionTimestamp))
				default:
					canAdopt = true
				}
			}
			if !canAdopt {
				continue
			}
			rev, err := controller.AdoptPod(ctx, dsc.env.Store, ds.Namespace, md.GetName(), ref, sel)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if rev > 0 {
				dsc.expect(ctx, objects.Pods, rev)
				out = append(out, kubePod(p))
			}
		case controller.Release:
			rev, err := controller.ReleasePod(ctx, dsc.env.Store, ds.Namespace, md.GetName(), string(ds.UID))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			dsc.expect(ctx, objects.Pods, rev)
		}
	}
	return out, utilerrors.NewAggregate(errs)
}

// getNodesToDaemonPods is kube's: ds's pods by the node each is for.
func (dsc *Controller) getNodesToDaemonPods(ctx context.Context, ds *apps.DaemonSet, includeDeletedTerminal bool) (map[string][]*v1.Pod, error) {
	claimedPods, err := dsc.getDaemonPods(ctx, ds)
	if err != nil {
		return nil, err
	}
	nodeToDaemonPods := make(map[string][]*v1.Pod)
	logger := klog.FromContext(ctx)
	for _, pod := range claimedPods {
		if !includeDeletedTerminal && podutil.IsPodTerminal(pod) && pod.DeletionTimestamp != nil {
			continue
		}
		nodeName, err := util.GetTargetNodeName(pod)
		if err != nil {
			logger.V(4).Info("Failed to get target node name of Pod in DaemonSet", "pod", klog.KObj(pod), "daemonset", klog.KObj(ds))
			continue
		}
		nodeToDaemonPods[nodeName] = append(nodeToDaemonPods[nodeName], pod)
	}
	return nodeToDaemonPods, nil
}

func (dsc *Controller) controllerRef(ds *apps.DaemonSet) *corev1.OwnerReference {
	return controller.ControllerRef("apps/v1", controllerKind.Kind, ds.Name, string(ds.UID))
}

// PodName is the name of the daemon pod of the DaemonSet named name with
// uid on node for template hash, in slot ordinal: the DaemonSet's name,
// "-", and five characters derived from (uid, node, hash, ordinal), as
// controller.PodName derives them. Every replica derives the same name, so
// a creation asked twice (a retry after no answer, a second owner after a
// kill) makes one pod; a pod still terminating in slot 0, or deleted
// from it a moment ago (podNameFor), moves its replacement to slot 1.
func PodName(name, uid, node, hash string, ordinal int) string {
	return controller.PodName(name+"-", uid+"/"+node+"/"+hash, ordinal)
}

// goneNamesFor is how long the name of a deleted daemon pod is not given
// to another: longer than clients wait for a failed daemon pod's name to
// be gone (the upstream test waits 5 minutes).
const goneNamesFor = 10 * time.Minute

// podNameFor returns the name of ds's next pod on node: the lowest slot
// whose name no pod of the informer has and no pod deleted in the last
// goneNamesFor had.
func (dsc *Controller) podNameFor(ds *apps.DaemonSet, node, hash string) string {
	now := time.Now()
	for ord := 0; ; ord++ {
		n := PodName(ds.Name, string(ds.UID), node, hash, ord)
		if _, taken := dsc.podInf.Get(ds.Namespace, n); !taken && !dsc.gone.Has(ds.Namespace, n, now) {
			return n
		}
	}
}

// syncNodes deletes the given pods and creates daemon pods on the given
// nodes (kube's syncNodes): at most burstReplicas of each, creations in
// a slow start, each pod through the pipeline (controller.Pods: the
// api stage, admission, persistence, the same trace as a user's pod)
// under a name derived from the DaemonSet, the node and the template
// hash (PodName), bound to its node by node affinity as kube's controller
// binds it (util.ReplaceDaemonSetPodNodeNameNodeAffinity), for the
// scheduler to place.
func (dsc *Controller) syncNodes(ctx context.Context, ds *apps.DaemonSet, podsToDelete, nodesNeedingDaemonPods []string, hash string) error {
	logger := klog.FromContext(ctx)
	si, _ := syncOf(ctx)
	key := controller.Key(ds.Namespace, ds.Name)
	createDiff := min(len(nodesNeedingDaemonPods), dsc.burstReplicas)
	deleteDiff := min(len(podsToDelete), dsc.burstReplicas)

	generation, err := util.GetTemplateGeneration(ds)
	if err != nil {
		generation = nil
	}
	template := util.CreatePodTemplate(ds.Spec.Template, generation, hash)
	var errs []error
	_, err = controller.SlowStart(ctx, createDiff, dsc.cfg.MaxInFlight, func() bool { return dsc.runner.Owns(key) }, func(ctx context.Context, i int) error {
		node := nodesNeedingDaemonPods[i]
		podTemplate := template.DeepCopy()
		podTemplate.Spec.Affinity = util.ReplaceDaemonSetPodNodeNameNodeAffinity(podTemplate.Spec.Affinity, node)
		return dsc.createPod(ctx, ds, podTemplate, dsc.podNameFor(ds, node, hash), si.started)
	})
	if err != nil {
		logger.V(2).Info("Slow-start failure: the next sync creates the rest", "daemonset", klog.KObj(ds), "err", err)
		errs = append(errs, err)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(dsc.cfg.MaxInFlight)
	for _, name := range podsToDelete[:deleteDiff] {
		g.Go(func() error {
			p, err := dsc.pods.Delete(gctx, ds.Namespace, name)
			if errors.Is(err, raftstore.ErrNotFound) {
				return nil
			}
			if err != nil {
				dsc.eventRecorder.Eventf(ds, v1.EventTypeWarning, "FailedDelete", "Error deleting: %v", err)
				return err
			}
			dsc.expect(ctx, objects.Pods, objects.Revision(p))
			dsc.eventRecorder.Eventf(ds, v1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: %v", name)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		errs = append(errs, err)
	}
	return utilerrors.NewAggregate(errs)
}

// createPod creates the pod name of ds from tmpl (kube's
// RealPodControl.CreatePods, with its Events).
func (dsc *Controller) createPod(ctx context.Context, ds *apps.DaemonSet, tmpl *v1.PodTemplateSpec, name string, started time.Time) error {
	pod, err := controller.PodFromTemplate(ds.Namespace, tmpl, nil)
	if err != nil {
		dsc.eventRecorder.Eventf(ds, v1.EventTypeWarning, "FailedCreate", "Error creating: %v", err)
		return err
	}
	pod.Metadata.Name = name
	pod.Metadata.OwnerReferences = []*corev1.OwnerReference{dsc.controllerRef(ds)}
	created, err := dsc.pods.Create(ctx, pod, started)
	var se *controller.StatusError
	switch {
	case err == nil:
		dsc.expect(ctx, objects.Pods, objects.Revision(created))
		dsc.eventRecorder.Eventf(ds, v1.EventTypeNormal, "SuccessfulCreate", "Created pod: %v", name)
		return nil
	case errors.Is(err, controller.ErrNameTaken):
		// Asked before (a retry, or a previous owner): the informers wait
		// for it.
		kv, gerr := dsc.env.Store.KV().Get(ctx, objects.Pods.Key(ds.Namespace, name))
		if gerr == nil {
			dsc.expect(ctx, objects.Pods, kv.ModRevision)
		} else if !errors.Is(gerr, raftstore.ErrNotFound) {
			return gerr
		}
		return nil
	case errors.As(err, &se):
		dsc.eventRecorder.Eventf(ds, v1.EventTypeWarning, "FailedCreate", "Error creating: %v", se.Status.GetMessage())
	}
	// No answer (controller.ErrUncertain): the next sync asks for the same
	// name again, the lowest free slot of the node and hash.
	return err
}

// podsOnRemovedNodes returns ds's pods bound to nodes that are gone: none
// of nodeList, and not in the store either (a node the informer has not
// shown yet is not gone). kube leaves them to its pod garbage collector
// (PodGC), which podflow does not run; this is podflow's addition, and
// deleteOrphanedPod removes them as PodGC does (at once: no node agent is
// left to stop them).
func (dsc *Controller) podsOnRemovedNodes(ctx context.Context, nodeList []*v1.Node, nodeToDaemonPods map[string][]*v1.Pod) []*v1.Pod {
	known := make(map[string]bool, len(nodeList))
	for _, n := range nodeList {
		known[n.Name] = true
	}
	var out []*v1.Pod
	for node, pods := range nodeToDaemonPods {
		if known[node] {
			continue
		}
		if _, err := dsc.env.Store.GetKind(ctx, objects.Nodes, "", node); !errors.Is(err, raftstore.ErrNotFound) {
			continue
		}
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// deleteOrphanedPod deletes pod p, bound to a node that is gone, from the
// store (kube's PodGC force-deletes such pods) and tells the pipeline
// (PodDeleted), as stage.RequestDeletion does for a pod no node runs.
func (dsc *Controller) deleteOrphanedPod(ctx context.Context, ds *apps.DaemonSet, p *v1.Pod) error {
	sp, err := dsc.env.Store.GetKind(ctx, objects.Pods, p.Namespace, p.Name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	pod := sp.(*corev1.Pod)
	if pod.GetMetadata().GetUid() != string(p.UID) || pod.GetSpec().GetNodeName() != p.Spec.NodeName {
		return nil // another pod by now, or moved: judged again next sync
	}
	rev, err := dsc.env.Store.Delete(ctx, objects.Pods, p.Namespace, p.Name, objects.Revision(pod))
	if errors.Is(err, raftstore.ErrNotFound) || errors.Is(err, raftstore.ErrConflict) {
		return nil
	}
	if err != nil {
		return err
	}
	dsc.expect(ctx, objects.Pods, rev)
	md := pod.GetMetadata()
	e := &eventsv1.Envelope{
		PodUid: md.GetUid(), Namespace: md.GetNamespace(), PodName: md.GetName(), NodeName: pod.GetSpec().GetNodeName(),
		Time: timestamppb.Now(), Stage: dsc.env.Stage, Replica: dsc.env.Replica, Attempt: 1, Generation: md.GetGeneration(),
		Traceparent: bus.NewTraceparent(),
		Payload:     &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{Revision: rev}},
	}
	if err := dsc.env.Pub.Publish(ctx, e); err != nil {
		return err
	}
	dsc.eventRecorder.Eventf(ds, v1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: %v (its node %s is gone)", p.Name, p.Spec.NodeName)
	return nil
}

// deleteOrphanedPods deletes ds's pods on removed nodes
// (podsOnRemovedNodes).
func (dsc *Controller) deleteOrphanedPods(ctx context.Context, ds *apps.DaemonSet, nodeList []*v1.Node, nodeToDaemonPods map[string][]*v1.Pod) error {
	var errs []error
	for _, p := range dsc.podsOnRemovedNodes(ctx, nodeList, nodeToDaemonPods) {
		if err := dsc.deleteOrphanedPod(ctx, ds, p); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}
