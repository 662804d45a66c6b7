package apiserver

import (
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	k8scorev1 "k8s.io/api/core/v1"
	k8seventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// Field selectors as kube-apiserver evaluates them: a selector may name
// only the field labels the kind supports (its scheme's field label
// conversion: pkg/apis/<group>/<version>/conversion.go), each compared
// with the value kube-apiserver computes for it (the registry's
// *ToSelectableFields: a bool as fmt.Sprint gives it, an absent field as
// its zero value), never with the object's JSON.

// fieldLabels are the field labels of the kinds that support more than
// metadata.name and metadata.namespace, by group and kind; a label maps to
// the label of the selectable field set it is read from (events.k8s.io's
// "regarding.name" is core/v1's "involvedObject.name").
var fieldLabels = map[[2]string]map[string]string{
	{"", "Pod"}: identity("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
		"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs", "status.nominatedNodeName").
		with("spec.host", "spec.nodeName"), // old v1 clients
	{"", "Node"}:                  identity("metadata.name", "spec.unschedulable"),
	{"", "ReplicationController"}: identity("metadata.name", "metadata.namespace", "status.replicas"),
	{"", "Event"}: identity("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
		"involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
		"reportingComponent", "source", "type", "metadata.namespace", "metadata.name"),
	{"", "Namespace"}: identity("status.phase", "metadata.name"),
	{"", "Secret"}:    identity("type", "metadata.namespace", "metadata.name"),
	{"", "Service"}:   identity("metadata.namespace", "metadata.name", "spec.clusterIP", "spec.type"),
	{"events.k8s.io", "Event"}: identity("reason", "type", "metadata.namespace", "metadata.name").
		with("regarding.kind", "involvedObject.kind").with("regarding.namespace", "involvedObject.namespace").
		with("regarding.name", "involvedObject.name").with("regarding.uid", "involvedObject.uid").
		with("regarding.apiVersion", "involvedObject.apiVersion").with("regarding.resourceVersion", "involvedObject.resourceVersion").
		with("regarding.fieldPath", "involvedObject.fieldPath").with("reportingController", "reportingComponent"),
	{"batch", "Job"}: identity("metadata.name", "metadata.namespace", "status.successful"),
	{"certificates.k8s.io", "CertificateSigningRequest"}: identity("metadata.name", "spec.signerName"),
}

type labelMap map[string]string

func identity(labels ...string) labelMap {
	m := labelMap{}
	for _, l := range labels {
		m[l] = l
	}
	return m
}

func (m labelMap) with(label, to string) labelMap { m[label] = to; return m }

// convertFieldSelector checks a field selector's labels against res's
// kind and maps them to its selectable fields, as kube-apiserver's
// ConvertFieldLabel: an unsupported label is a 400 with the scheme's
// message.
func convertFieldSelector(res *resource, sel fields.Selector) (fields.Selector, error) {
	m, ok := fieldLabels[[2]string{res.group, res.kind}]
	return sel.Transform(func(label, value string) (string, string, error) {
		if !ok {
			switch label {
			case "metadata.name", "metadata.namespace":
				return label, value, nil
			}
			return "", "", fmt.Errorf("%q is not a known field selector: only %q, %q", label, "metadata.name", "metadata.namespace")
		}
		to, found := m[label]
		if !found {
			return "", "", fmt.Errorf("field label not supported: %s", label)
		}
		return to, value, nil
	})
}

// selectableFields is the field set of an object's Kubernetes form, as
// the kind's registry strategy computes it (GetAttrs).
func selectableFields(k runtime.Object) fields.Set {
	md := metaOf(k)
	set := fields.Set{"metadata.name": md.GetName(), "metadata.namespace": md.GetNamespace()}
	switch o := k.(type) {
	case *k8scorev1.Pod:
		podIP := ""
		if len(o.Status.PodIPs) > 0 {
			podIP = o.Status.PodIPs[0].IP
		} else {
			podIP = o.Status.PodIP
		}
		set["spec.nodeName"] = o.Spec.NodeName
		set["spec.restartPolicy"] = string(o.Spec.RestartPolicy)
		set["spec.schedulerName"] = o.Spec.SchedulerName
		if o.Spec.SchedulerName == "" { // stored pods leave kube's default out; the scheduler reads "" as it
			set["spec.schedulerName"] = k8scorev1.DefaultSchedulerName
		}
		set["spec.serviceAccountName"] = o.Spec.ServiceAccountName
		set["spec.hostNetwork"] = strconv.FormatBool(o.Spec.HostNetwork)
		set["status.phase"] = string(o.Status.Phase)
		set["status.podIP"] = podIP
		set["status.nominatedNodeName"] = o.Status.NominatedNodeName
	case *k8scorev1.Node:
		set["spec.unschedulable"] = fmt.Sprint(o.Spec.Unschedulable)
	case *k8scorev1.Namespace:
		set["status.phase"] = string(o.Status.Phase)
		set["name"] = o.Name // kube-apiserver keeps this one for compatibility
	case *k8scorev1.Secret:
		set["type"] = string(o.Type)
	case *k8scorev1.Service:
		set["spec.clusterIP"] = o.Spec.ClusterIP
		set["spec.type"] = string(o.Spec.Type)
	case *k8scorev1.ReplicationController:
		set["status.replicas"] = strconv.Itoa(int(o.Status.Replicas))
	case *k8scorev1.Event:
		source := o.Source.Component
		if source == "" {
			source = o.ReportingController
		}
		eventFields(set, o.InvolvedObject, o.Reason, o.ReportingController, source, o.Type)
	case *k8seventsv1.Event:
		source := o.DeprecatedSource.Component
		if source == "" {
			source = o.ReportingController
		}
		eventFields(set, o.Regarding, o.Reason, o.ReportingController, source, o.Type)
	case *batchv1.Job:
		set["status.successful"] = strconv.Itoa(int(o.Status.Succeeded))
	case *certificatesv1.CertificateSigningRequest:
		set["spec.signerName"] = o.Spec.SignerName
	}
	return set
}

func eventFields(set fields.Set, io k8scorev1.ObjectReference, reason, reporting, source, typ string) {
	set["involvedObject.kind"] = io.Kind
	set["involvedObject.namespace"] = io.Namespace
	set["involvedObject.name"] = io.Name
	set["involvedObject.uid"] = string(io.UID)
	set["involvedObject.apiVersion"] = io.APIVersion
	set["involvedObject.resourceVersion"] = io.ResourceVersion
	set["involvedObject.fieldPath"] = io.FieldPath
	set["reason"] = reason
	set["reportingComponent"] = reporting
	set["source"] = source
	set["type"] = typ
}
