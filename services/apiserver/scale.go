package apiserver

// The scale subresource (autoscaling/v1 Scale) of deployments,
// replicasets, statefulsets and replicationcontrollers, as
// kube-apiserver's ScaleREST: a GET answers the object's replicas and its
// selector as a string; a PUT or PATCH of the Scale sets spec.replicas of
// the object, which the api stage then writes through the kind's own
// strategy after validating the Scale (services/registry).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// replicasOf is the spec.replicas field of the kinds with a scale
// subresource, and their selector as a label selector string.
func replicasOf(k runtime.Object) (replicas **int32, statusReplicas int32, selector string, err error) {
	switch o := k.(type) {
	case *appsv1.Deployment:
		sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
		return &o.Spec.Replicas, o.Status.Replicas, selectorString(sel, err), err
	case *appsv1.ReplicaSet:
		sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
		return &o.Spec.Replicas, o.Status.Replicas, selectorString(sel, err), err
	case *appsv1.StatefulSet:
		sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
		return &o.Spec.Replicas, o.Status.Replicas, selectorString(sel, err), err
	case *k8scorev1.ReplicationController:
		return &o.Spec.Replicas, o.Status.Replicas, labels.SelectorFromSet(o.Spec.Selector).String(), nil
	}
	return nil, 0, "", fmt.Errorf("apiserver: %T has no scale subresource", k)
}

func selectorString(sel labels.Selector, err error) string {
	if err != nil {
		return ""
	}
	return sel.String()
}

// scaleOf is the Scale of a stored object.
func scaleOf(res *resource, obj objects.Object) (*autoscalingv1.Scale, *corev1.Status) {
	k, err := res.toKube(obj)
	if err != nil {
		return nil, stage.Internal(err)
	}
	if res.cr != nil { // a custom resource's replicas paths
		sc, _, err := res.cr.Scale(k.(*unstructured.Unstructured))
		if err != nil {
			return nil, crd.StatusOf(apierrors.NewBadRequest(err.Error()))
		}
		return sc, nil
	}
	replicas, statusReplicas, selector, err := replicasOf(k)
	if err != nil {
		return nil, stage.Internal(err)
	}
	md := metaOf(k)
	sc := &autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{Kind: "Scale", APIVersion: "autoscaling/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUID(),
			ResourceVersion: md.GetResourceVersion(), CreationTimestamp: md.GetCreationTimestamp()},
		Status: autoscalingv1.ScaleStatus{Replicas: statusReplicas, Selector: selector}}
	if *replicas != nil {
		sc.Spec.Replicas = **replicas
	}
	return sc, nil
}

// withReplicas is obj with spec.replicas n.
func withReplicas(res *resource, obj objects.Object, n int32) (objects.Object, *corev1.Status) {
	k, err := res.toKube(obj)
	if err != nil {
		return nil, stage.Internal(err)
	}
	k = k.DeepCopyObject()
	if res.cr != nil {
		if err := res.cr.SetReplicas(k.(*unstructured.Unstructured), n); err != nil {
			return nil, crd.StatusOf(apierrors.NewBadRequest(err.Error()))
		}
		m, err := manifest.FromKube(k)
		if err != nil {
			return nil, stage.Internal(err)
		}
		return m.(objects.Object), nil
	}
	replicas, _, _, err := replicasOf(k)
	if err != nil {
		return nil, stage.Internal(err)
	}
	*replicas = &n
	m, err := manifest.FromKube(k)
	if err != nil {
		return nil, stage.Internal(err)
	}
	return m.(objects.Object), nil
}

// serveScale answers GET, PUT and PATCH of a scale subresource. A patch
// without a resourceVersion precondition is re-applied after a conflict,
// as for the object itself.
func (s *Server) serveScale(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	if req.verb == "get" {
		current, st := s.read(ctx, req.res, req.namespace, req.name)
		var sc *autoscalingv1.Scale
		if st == nil {
			sc, st = scaleOf(req.res, current)
		}
		if st == nil && req.res.cr != nil && !crReplicasSet(req.res, current) {
			st = crd.StatusOf(req.res.cr.ScaleReplicasMissing(true))
		}
		if st != nil {
			writeStatus(w, st)
			return
		}
		writeKube(w, r, http.StatusOK, sc)
		return
	}
	dry, _, body, ok := s.mutation(w, r)
	if !ok {
		return
	}
	ct := r.Header.Get("Content-Type")
	if req.verb == "update" {
		var st *corev1.Status
		if body, st = bodyJSON(r, body, func() runtime.Object { return &autoscalingv1.Scale{} }); st != nil {
			writeStatus(w, st)
			return
		}
	}
	manager, st := managerName(r, false, map[string]string{"update": "Update", "patch": "Patch"}[req.verb])
	if st != nil {
		writeStatus(w, st)
		return
	}
	retry := req.verb == "patch" && !patchHasPrecondition(body, ct)
	for attempt := 0; ; attempt++ {
		current, st := s.read(ctx, req.res, req.namespace, req.name)
		if st != nil {
			writeStatus(w, st)
			return
		}
		old, st := scaleOf(req.res, current)
		if st != nil {
			writeStatus(w, st)
			return
		}
		next, st := s.scaleRequested(req, old, body, ct)
		if st != nil {
			writeStatus(w, st)
			return
		}
		md := current.GetMetadata()
		if (next.UID != "" && string(next.UID) != md.GetUid()) || (next.ResourceVersion != "" && next.ResourceVersion != md.GetResourceVersion()) {
			writeStatus(w, conflict(req.res.name+"/scale", req.name))
			return
		}
		obj, st := withReplicas(req.res, current, next.Spec.Replicas)
		if st == nil {
			st = manageFields(req.res, req.sub, current, obj, manager)
		}
		if st != nil {
			writeStatus(w, st)
			return
		}
		st, out := s.object(ctx, req, "update", obj, nil, dry)
		if retry && st.GetCode() == http.StatusConflict && st.GetReason() == eventsv1.ReasonConflict && attempt < maxPatchRetries && ctx.Err() == nil {
			continue
		}
		if st.GetStatus() == "Failure" || st.GetCode() >= 300 {
			writeStatus(w, st)
			return
		}
		writeWarnings(w, st.GetWarnings())
		written, ok := out.(objects.Object)
		if !ok {
			writeStatus(w, stage.Internal(fmt.Errorf("apiserver: the scale update answered %T", out)))
			return
		}
		sc, st := scaleOf(req.res, written)
		if st != nil {
			writeStatus(w, st)
			return
		}
		writeKube(w, r, http.StatusOK, sc)
		return
	}
}

// scaleRequested is the Scale a PUT body holds, or old patched.
func (s *Server) scaleRequested(req *request, old *autoscalingv1.Scale, body []byte, ct string) (*autoscalingv1.Scale, *corev1.Status) {
	if req.verb == "patch" {
		orig, err := json.Marshal(old)
		if err != nil {
			return nil, stage.Internal(err)
		}
		mt, _, _ := strings.Cut(ct, ";")
		switch strings.TrimSpace(mt) {
		case patchStrategic:
			body, err = strategicpatch.StrategicMergePatch(orig, body, &autoscalingv1.Scale{})
		case patchMerge:
			body, err = jsonpatch.MergePatch(orig, body)
		case patchJSON:
			var st *corev1.Status
			if body, st = applyPatchType(orig, body, ct, req.res, s.patchLimits()); st != nil {
				return nil, st
			}
		default:
			return nil, stage415(mt, req.res)
		}
		if err != nil {
			return nil, badRequest("apply the patch to the Scale: %v", err)
		}
	}
	sc := &autoscalingv1.Scale{}
	if err := yaml.Unmarshal(body, sc); err != nil {
		return nil, badRequest("Scale in version %q cannot be handled as a Scale: %v", "v1", err)
	}
	if sc.Kind != "" && (sc.Kind != "Scale" || sc.APIVersion != "autoscaling/v1") {
		return nil, badRequest("the object in the request body is %s %s; autoscaling/v1 Scale expected", sc.APIVersion, sc.Kind)
	}
	return sc, nil
}

// crReplicasSet reports whether a custom resource has its
// specReplicasPath set (a Scale GET of one that has not is
// kube-apiserver's 500).
func crReplicasSet(res *resource, obj objects.Object) bool {
	k, err := res.toKube(obj)
	if err != nil {
		return false
	}
	_, found, err := res.cr.Scale(k.(*unstructured.Unstructured))
	return err == nil && found
}
