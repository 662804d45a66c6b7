package admission

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// checkLimitRanges enforces the min and max of the Container items of the
// LimitRanges on every container, after defaulting, as Kubernetes'
// LimitRanger does: a 403 Forbidden Status listing every breach, e.g.
//
//	pods "web" is forbidden: maximum cpu usage per Container is 2, but limit is 4
func checkLimitRanges(pod *corev1.Pod, lrs []*corev1.LimitRange) *corev1.Status {
	var msgs []string
	var causes []*corev1.StatusCause
	breach := func(field, msg string) {
		msgs = append(msgs, msg)
		causes = append(causes, &corev1.StatusCause{Type: "FieldValueForbidden", Message: msg, Field: field})
	}
	for _, lr := range lrs {
		for _, item := range lr.GetSpec().GetLimits() {
			if item.GetType() != "Container" {
				continue
			}
			for _, ca := range containers(pod) {
				reqs, lims := ca.c.GetResources().GetRequests(), ca.c.GetResources().GetLimits()
				for _, res := range slices.Sorted(maps.Keys(item.GetMin())) {
					minQ, err := resource.ParseQuantity(item.GetMin()[res])
					if err != nil {
						continue // an invalid LimitRange constrains nothing
					}
					req, hasReq := reqs[res]
					lim, hasLim := lims[res]
					switch {
					case !hasReq:
						breach(ca.path()+".resources.requests["+res+"]",
							fmt.Sprintf("minimum %s usage per Container is %s.  No request is specified", res, minQ.String()))
					case cmpQty(req, minQ) < 0:
						breach(ca.path()+".resources.requests["+res+"]",
							fmt.Sprintf("minimum %s usage per Container is %s, but request is %s", res, minQ.String(), req))
					case hasLim && cmpQty(lim, minQ) < 0:
						breach(ca.path()+".resources.limits["+res+"]",
							fmt.Sprintf("minimum %s usage per Container is %s, but limit is %s", res, minQ.String(), lim))
					}
				}
				for _, res := range slices.Sorted(maps.Keys(item.GetMax())) {
					maxQ, err := resource.ParseQuantity(item.GetMax()[res])
					if err != nil {
						continue
					}
					req, hasReq := reqs[res]
					lim, hasLim := lims[res]
					switch {
					case !hasLim:
						breach(ca.path()+".resources.limits["+res+"]",
							fmt.Sprintf("maximum %s usage per Container is %s.  No limit is specified", res, maxQ.String()))
					case cmpQty(lim, maxQ) > 0:
						breach(ca.path()+".resources.limits["+res+"]",
							fmt.Sprintf("maximum %s usage per Container is %s, but limit is %s", res, maxQ.String(), lim))
					case hasReq && cmpQty(req, maxQ) > 0:
						breach(ca.path()+".resources.requests["+res+"]",
							fmt.Sprintf("maximum %s usage per Container is %s, but request is %s", res, maxQ.String(), req))
					}
				}
			}
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	detail := msgs[0]
	if len(msgs) > 1 {
		detail = "[" + strings.Join(msgs, ", ") + "]"
	}
	name := pod.GetMetadata().GetName()
	return &corev1.Status{
		Status:  "Failure",
		Code:    403,
		Reason:  eventsv1.ReasonForbidden,
		Kind:    "Pod",
		Name:    name,
		Message: fmt.Sprintf("pods %q is forbidden: %s", name, detail),
		Causes:  causes,
	}
}

// cmpQty compares the quantity string s with q; an unparseable s (which
// schema validation has already rejected) compares equal.
func cmpQty(s string, q resource.Quantity) int {
	v, err := resource.ParseQuantity(s)
	if err != nil {
		return 0
	}
	return v.Cmp(q)
}

// containerAt is a container with its place in the pod spec.
type containerAt struct {
	c    *corev1.Container
	init bool
	i    int
}

// path returns the container's field path, e.g. "spec.containers[0]".
func (ca containerAt) path() string {
	if ca.init {
		return "spec.initContainers[" + strconv.Itoa(ca.i) + "]"
	}
	return "spec.containers[" + strconv.Itoa(ca.i) + "]"
}

// containers are the pod's init and app containers, in that order.
func containers(p *corev1.Pod) []containerAt {
	spec := p.GetSpec()
	out := make([]containerAt, 0, len(spec.GetInitContainers())+len(spec.GetContainers()))
	for i, c := range spec.GetInitContainers() {
		out = append(out, containerAt{c, true, i})
	}
	for i, c := range spec.GetContainers() {
		out = append(out, containerAt{c, false, i})
	}
	return out
}
