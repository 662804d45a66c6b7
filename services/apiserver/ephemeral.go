package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/validate"
)

// The pods/ephemeralcontainers subresource (kubectl debug), as
// kube-apiserver's: GET reads the pod; PUT and PATCH (any patch type a pod
// takes) change only spec.ephemeralContainers — the rest of the object
// sent is ignored — and may only add containers, never change or remove
// one. A new container must meet the namespace's Pod Security level, as
// any container of the pod (services/podsecurity). The write's manager is recorded in managedFields with subresource
// "ephemeralcontainers" (operation Update, or Apply), owning the fields it
// wrote; one that adds nothing writes nothing. RBAC: the verb on
// pods/ephemeralcontainers.

// isEphemeral reports whether req is on a pod's ephemeralcontainers.
func isEphemeral(req *request) bool {
	return req.res.name == "pods" && req.res.group == "" && req.sub == "ephemeralcontainers"
}

func (s *Server) serveEphemeral(w http.ResponseWriter, r *http.Request, req *request) {
	if req.name == "" || (req.verb != "get" && req.verb != "update" && req.verb != "patch") {
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	attrs := auth.Attributes{User: req.user, Verb: req.verb, Namespace: req.namespace, Resource: "pods",
		Subresource: req.sub, Name: req.name}
	if d := s.backend.Authorize(attrs); !d.Allowed {
		writeStatus(w, auth.Forbidden(attrs, ""))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	if req.verb == "get" {
		obj, st := s.read(ctx, req.res, req.namespace, req.name)
		if st != nil {
			writeStatus(w, st)
			return
		}
		s.writeObject(w, r, http.StatusOK, req.res, obj)
		return
	}
	dry, validation, body, ok := s.mutation(w, r)
	if !ok {
		return
	}
	ct := r.Header.Get("Content-Type")
	var st *corev1.Status
	if req.verb == "update" {
		if body, st = bodyJSON(r, body, kubeType(req.res)); st != nil {
			writeStatus(w, st)
			return
		}
	}
	kind := "Update"
	if req.verb == "patch" {
		kind = "Patch"
	}
	manager, st := managerName(r, strings.HasPrefix(ct, patchApply), kind)
	if st != nil {
		writeStatus(w, st)
		return
	}
	for attempt := 0; ; attempt++ {
		current, st := s.read(ctx, req.res, req.namespace, req.name)
		if st != nil {
			writeStatus(w, st)
			return
		}
		obj, warnings, st := s.updated(req, current, body, ct, validation, manager, false)
		if st != nil {
			writeStatus(w, st)
			return
		}
		cur, next := current.(*corev1.Pod), obj.(*corev1.Pod)
		if rv := next.GetMetadata().GetResourceVersion(); rv != "" && rv != cur.GetMetadata().GetResourceVersion() {
			writeStatus(w, conflict(req.res.name, req.name))
			return
		}
		if errs := manifest.RefusedPodFields(&corev1.Pod{Spec: &corev1.PodSpec{EphemeralContainers: next.GetSpec().GetEphemeralContainers()}}); len(errs) > 0 {
			writeStatus(w, validate.InvalidStatus("Pod", req.name, errs)) // what podflow refuses in any container
			return
		}
		if causes := ValidateEphemeralUpdate(cur, next.GetSpec().GetEphemeralContainers()); len(causes) > 0 {
			writeStatus(w, invalid("Pod", req.name, causes, "Pod %q is invalid: %s: %s", req.name, causes[0].GetField(), causes[0].GetMessage()))
			return
		}
		out := proto.CloneOf(cur)
		out.Spec.EphemeralContainers = next.GetSpec().GetEphemeralContainers()
		if !proto.Equal(out.GetSpec(), cur.GetSpec()) {
			out.Metadata.Generation++ // kube's updatePodGeneration
		}
		if st := s.checkPodSecurity(ctx, cur, out); st != nil { // a container is added: its namespace's level
			writeStatus(w, st)
			return
		}
		if req.verb == "patch" && strings.HasPrefix(ct, patchApply) { // the apply's own entry
			out.Metadata.ManagedFields = next.GetMetadata().GetManagedFields()
		} else if st := manageFields(req.res, req.sub, cur, out, manager); st != nil { // of what is written, not of what was sent
			writeStatus(w, st)
			return
		}
		writeWarnings(w, warnings)
		if dry {
			s.writeObject(w, r, http.StatusOK, req.res, out)
			return
		}
		rv := cur.GetMetadata().GetResourceVersion()
		saved, err := objects.Mutate(ctx, s.store, req.namespace, req.name, func(p *corev1.Pod) error {
			if p.GetMetadata().GetResourceVersion() != rv {
				return errChanged
			}
			if proto.Equal(&corev1.PodSpec{EphemeralContainers: p.GetSpec().GetEphemeralContainers()},
				&corev1.PodSpec{EphemeralContainers: out.GetSpec().GetEphemeralContainers()}) {
				return objects.ErrNoChange
			}
			p.Spec.EphemeralContainers = out.GetSpec().GetEphemeralContainers()
			p.Metadata.ManagedFields = out.GetMetadata().GetManagedFields()
			p.Metadata.Generation++ // the spec changed: kube's updatePodGeneration
			return nil
		})
		if errors.Is(err, errChanged) && attempt < maxPatchRetries && ctx.Err() == nil {
			continue // validated against an older pod: again on the new one
		}
		if err != nil {
			writeStatus(w, storeStatus(err, req.res, req.name))
			return
		}
		s.writeObject(w, r, http.StatusOK, req.res, saved)
		return
	}
}

// errChanged: the pod changed between validation and write.
var errChanged = errors.New("apiserver: the pod changed")

// ValidateEphemeralUpdate checks next, a pod's new ephemeral containers,
// against the pod as kube-apiserver's ValidatePodEphemeralContainersUpdate
// and validateEphemeralContainers: the existing ones are kept unchanged
// and in place, and each new one has a unique name and an image, targets
// a container of the pod (when it names one) and sets none of the fields
// an ephemeral container may not have (ports, probes, lifecycle,
// resources, restartPolicy).
func ValidateEphemeralUpdate(pod *corev1.Pod, next []*corev1.EphemeralContainer) []*corev1.StatusCause {
	var causes []*corev1.StatusCause
	add := func(typ, field, format string, args ...any) {
		causes = append(causes, &corev1.StatusCause{Type: typ, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	old := pod.GetSpec().GetEphemeralContainers()
	existing := map[string]bool{}
	for _, c := range old {
		existing[c.GetName()] = true
	}
	kept := map[string]*corev1.EphemeralContainer{}
	for _, c := range next {
		kept[c.GetName()] = c
	}
	for _, c := range old {
		if n, ok := kept[c.GetName()]; !ok {
			add("FieldValueForbidden", "spec.ephemeralContainers", "Forbidden: existing ephemeral containers %q may not be removed", c.GetName())
		} else if !proto.Equal(c, n) {
			add("FieldValueForbidden", "spec.ephemeralContainers", "Forbidden: existing ephemeral containers %q may not be changed", c.GetName())
		}
	}
	names := map[string]bool{}
	for _, c := range pod.GetSpec().GetInitContainers() {
		names[c.GetName()] = true
	}
	targets := map[string]bool{}
	for _, c := range pod.GetSpec().GetContainers() {
		names[c.GetName()], targets[c.GetName()] = true, true
	}
	for name := range names {
		targets[name] = true // init containers too, as upstream
	}
	for i, c := range next {
		path := fmt.Sprintf("spec.ephemeralContainers[%d]", i)
		switch {
		case c.GetName() == "":
			add("FieldValueRequired", path+".name", "Required value")
		case names[c.GetName()]:
			add("FieldValueDuplicate", path+".name", "Duplicate value: %q", c.GetName())
		}
		names[c.GetName()] = true
		if existing[c.GetName()] {
			continue // unchanged, checked above
		}
		if c.GetImage() == "" {
			add("FieldValueRequired", path+".image", "Required value")
		}
		if t := c.GetTargetContainerName(); t != "" && !targets[t] {
			add("FieldValueNotFound", path+".targetContainerName", "Not found: %q", t)
		}
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"ports", len(c.GetPorts()) > 0},
			{"livenessProbe", c.GetLivenessProbe() != nil},
			{"readinessProbe", c.GetReadinessProbe() != nil},
			{"startupProbe", c.GetStartupProbe() != nil},
			{"lifecycle", c.GetLifecycle() != nil},
			{"resources", len(c.GetResources().GetLimits()) > 0 || len(c.GetResources().GetRequests()) > 0},
			{"restartPolicy", c.GetRestartPolicy() != ""},
		} {
			if f.set {
				add("FieldValueForbidden", path+"."+f.name, "Forbidden: cannot be set for an Ephemeral Container")
			}
		}
		for j, vm := range c.GetVolumeMounts() { // subpaths leak bind mounts until the pod exits
			vp := fmt.Sprintf("%s.volumeMounts[%d]", path, j)
			if vm.GetSubPath() != "" {
				add("FieldValueForbidden", vp+".subPath", "Forbidden: cannot be set for an Ephemeral Container")
			}
			if vm.GetSubPathExpr() != "" {
				add("FieldValueForbidden", vp+".subPathExpr", "Forbidden: cannot be set for an Ephemeral Container")
			}
		}
	}
	return causes
}
