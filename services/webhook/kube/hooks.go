package kube

import (
	"net/url"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/apiserver/pkg/util/proxy"
	admissionregistrationv1listers "k8s.io/client-go/listers/admissionregistration/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/podflow/podflow/services/storeclient"
	"github.com/podflow/podflow/services/webhook"
)

type hookKind int

const (
	mutatingHooks hookKind = iota
	validatingHooks
	policyHooks
)

// hookIndex answers, before any conversion, whether a request may concern
// a configured webhook or policy at all: most writes concern none, and
// cost nothing then.
type hookIndex struct {
	mutating   admissionregistrationv1listers.MutatingWebhookConfigurationLister
	validating admissionregistrationv1listers.ValidatingWebhookConfigurationLister
	bindings   admissionregistrationv1listers.ValidatingAdmissionPolicyBindingLister
}

func newHookIndex(f *storeclient.Factory) hookIndex {
	ar := f.Admissionregistration().V1()
	return hookIndex{mutating: ar.MutatingWebhookConfigurations().Lister(), validating: ar.ValidatingWebhookConfigurations().Lister(),
		bindings: ar.ValidatingAdmissionPolicyBindings().Lister()}
}

// mayMatch reports whether a webhook of kind k has a rule matching r's
// operation and resource in any version (selectors, conditions and
// matchPolicy are the plugins': a request to one version of a custom
// resource is sent to a webhook listing another), or, for policies,
// whether any binding exists.
func (h hookIndex) mayMatch(k hookKind, r *webhook.Request) bool {
	attrs := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{}, r.Namespace, r.Name,
		schema.GroupVersionResource{Group: r.Kind.APIGroup, Version: r.Kind.Version, Resource: r.Kind.Resource}, r.Subresource,
		admission.Operation(r.Operation), nil, false, nil)
	switch k {
	case mutatingHooks:
		cfgs, _ := h.mutating.List(labels.Everything())
		for _, c := range cfgs {
			for i := range c.Webhooks {
				for _, rule := range c.Webhooks[i].Rules {
					if anyVersion(rule, attrs) {
						return true
					}
				}
			}
		}
	case validatingHooks:
		cfgs, _ := h.validating.List(labels.Everything())
		for _, c := range cfgs {
			for i := range c.Webhooks {
				for _, rule := range c.Webhooks[i].Rules {
					if anyVersion(rule, attrs) {
						return true
					}
				}
			}
		}
	case policyHooks:
		b, _ := h.bindings.List(labels.Everything())
		return len(b) > 0
	}
	return false
}

// anyVersion reports whether rule matches attrs in any version.
func anyVersion(rule admissionregistrationv1.RuleWithOperations, attrs admission.Attributes) bool {
	rule.APIVersions = []string{"*"}
	return (&rules.Matcher{Rule: rule, Attr: attrs}).Matches()
}

// reinvocable reports whether a mutating webhook asks to be reinvoked
// (reinvocationPolicy IfNeeded): only then is a second pass over the
// built-in mutations and the webhooks worth its conversions.
func (h hookIndex) reinvocable() bool {
	cfgs, _ := h.mutating.List(labels.Everything())
	for _, c := range cfgs {
		for i := range c.Webhooks {
			if p := c.Webhooks[i].ReinvocationPolicy; p != nil && *p == admissionregistrationv1.IfNeededReinvocationPolicy {
				return true
			}
		}
	}
	return false
}

// endpointResolver resolves a webhook's Service to one of its Ready
// endpoints (kube-apiserver's --enable-aggregator-routing resolver).
type endpointResolver struct {
	services corev1listers.ServiceLister
	slices   proxy.EndpointSliceGetter
}

func (r endpointResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	return proxy.ResolveEndpoint(r.services, r.slices, namespace, name, port)
}
