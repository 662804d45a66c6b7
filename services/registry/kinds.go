package registry

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresourcedefinition"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/rest"
	apiregistrationinstall "k8s.io/kube-aggregator/pkg/apis/apiregistration/install"
	"k8s.io/kube-aggregator/pkg/registry/apiservice"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	admissionregistrationapi "k8s.io/kubernetes/pkg/apis/admissionregistration"
	_ "k8s.io/kubernetes/pkg/apis/admissionregistration/install"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	_ "k8s.io/kubernetes/pkg/apis/certificates/install"
	_ "k8s.io/kubernetes/pkg/apis/coordination/install"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	_ "k8s.io/kubernetes/pkg/apis/flowcontrol/install"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	_ "k8s.io/kubernetes/pkg/apis/node/install"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"
	_ "k8s.io/kubernetes/pkg/apis/scheduling/install"
	_ "k8s.io/kubernetes/pkg/apis/storage/install"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/mutatingwebhookconfiguration"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/resolver"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingadmissionpolicy"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingadmissionpolicybinding"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingwebhookconfiguration"
	"k8s.io/kubernetes/pkg/registry/apps/controllerrevision"
	"k8s.io/kubernetes/pkg/registry/apps/daemonset"
	"k8s.io/kubernetes/pkg/registry/apps/deployment"
	"k8s.io/kubernetes/pkg/registry/apps/replicaset"
	"k8s.io/kubernetes/pkg/registry/apps/statefulset"
	"k8s.io/kubernetes/pkg/registry/autoscaling/horizontalpodautoscaler"
	"k8s.io/kubernetes/pkg/registry/batch/cronjob"
	"k8s.io/kubernetes/pkg/registry/batch/job"
	"k8s.io/kubernetes/pkg/registry/certificates/certificates"
	"k8s.io/kubernetes/pkg/registry/coordination/lease"
	"k8s.io/kubernetes/pkg/registry/core/persistentvolume"
	"k8s.io/kubernetes/pkg/registry/core/persistentvolumeclaim"
	"k8s.io/kubernetes/pkg/registry/core/podtemplate"
	"k8s.io/kubernetes/pkg/registry/core/replicationcontroller"
	"k8s.io/kubernetes/pkg/registry/core/resourcequota"
	"k8s.io/kubernetes/pkg/registry/flowcontrol/flowschema"
	"k8s.io/kubernetes/pkg/registry/flowcontrol/prioritylevelconfiguration"
	"k8s.io/kubernetes/pkg/registry/networking/ingress"
	"k8s.io/kubernetes/pkg/registry/networking/ingressclass"
	"k8s.io/kubernetes/pkg/registry/networking/ipaddress"
	"k8s.io/kubernetes/pkg/registry/networking/networkpolicy"
	"k8s.io/kubernetes/pkg/registry/networking/servicecidr"
	"k8s.io/kubernetes/pkg/registry/node/runtimeclass"
	"k8s.io/kubernetes/pkg/registry/policy/poddisruptionbudget"
	"k8s.io/kubernetes/pkg/registry/storage/csidriver"
	"k8s.io/kubernetes/pkg/registry/storage/csinode"
	"k8s.io/kubernetes/pkg/registry/storage/csistoragecapacity"
	"k8s.io/kubernetes/pkg/registry/storage/storageclass"
	"k8s.io/kubernetes/pkg/registry/storage/volumeattachment"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// createStrategy and updateStrategy are kube-apiserver's registry
// strategies (k8s.io/apiserver/pkg/registry/rest).
type (
	createStrategy = rest.RESTCreateStrategy
	updateStrategy = rest.RESTUpdateStrategy
)

// strategies are one kind's: the scheme its internal type lives in, and
// its strategy for a create and for an update through each subresource
// ("" the object itself; "scale" goes through the object's).
type strategies struct {
	scheme *runtime.Scheme
	create createStrategy
	update map[string]updateStrategy
}

// apiextensionsScheme holds apiextensions.k8s.io's internal and v1 types,
// which kube-apiserver's legacy scheme does not (the CRD registry is the
// apiextensions-apiserver's).
var apiextensionsScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiextensionsinstall.Install(s)
	return s
}()

// apiregistrationScheme holds apiregistration.k8s.io's internal, v1 and
// v1beta1 types (kube-aggregator's, as the APIService registry is).
var apiregistrationScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiregistrationinstall.Install(s)
	return s
}()

// both is a strategy serving creates and updates.
type both interface {
	createStrategy
	updateStrategy
}

func main(s both, sub ...any) *strategies {
	st := &strategies{scheme: legacyscheme.Scheme, create: s, update: map[string]updateStrategy{"": s, "scale": s}}
	for i := 0; i+1 < len(sub); i += 2 {
		st.update[sub[i].(string)] = sub[i+1].(updateStrategy)
	}
	return st
}

// builtins are the strategies of the built-in generic kinds
// (objects.Kinds), by group and kind; authz authorizes what a strategy
// authorizes itself (a ValidatingAdmissionPolicy's paramKind).
func builtins(authz authorizer.UnconditionalAuthorizer, st *objects.Store) map[schema.GroupKind]*strategies {
	resolve := resolver.ResourceResolverFunc(func(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
		for _, k := range objects.Kinds() {
			if k.APIGroup == gvk.Group && k.Name == gvk.Kind {
				return schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: k.Resource}, nil
			}
		}
		return schema.GroupVersionResource{}, &noKind{gvk}
	})
	vap := validatingadmissionpolicy.NewStrategy(authz, resolve)
	vapb := validatingadmissionpolicybinding.NewStrategy(authz, policyGetter{st}, resolve)
	crd := crdStrategy{customresourcedefinition.NewStrategy(apiextensionsScheme)}
	crdStatus := customresourcedefinition.NewStatusStrategy(apiextensionsScheme)
	apiServiceStrategy := apiservice.NewStrategy(apiregistrationScheme)
	gk := func(k objects.Kind) schema.GroupKind { return schema.GroupKind{Group: k.APIGroup, Kind: k.Name} }
	return map[schema.GroupKind]*strategies{
		gk(objects.Deployments):         main(deployment.Strategy, "status", deployment.StatusStrategy),
		gk(objects.ReplicaSets):         main(replicaset.Strategy, "status", replicaset.StatusStrategy),
		gk(objects.StatefulSets):        main(statefulSetStrategy{statefulset.Strategy}, "status", statefulset.StatusStrategy),
		gk(objects.DaemonSets):          main(daemonset.Strategy, "status", daemonset.StatusStrategy),
		gk(objects.ControllerRevisions): main(controllerrevision.Strategy),
		gk(objects.Jobs):                main(job.Strategy, "status", job.StatusStrategy),
		gk(objects.CronJobs):            main(cronjob.Strategy, "status", cronjob.StatusStrategy),
		gk(objects.HorizontalPodAutoscalers): main(horizontalpodautoscaler.Strategy, "status",
			horizontalpodautoscaler.StatusStrategy),
		gk(objects.PodDisruptionBudgets):              main(poddisruptionbudget.Strategy, "status", poddisruptionbudget.StatusStrategy),
		gk(objects.ReplicationControllers):            main(replicationcontroller.Strategy, "status", replicationcontroller.StatusStrategy),
		gk(objects.PodTemplates):                      main(podtemplate.Strategy),
		gk(objects.ResourceQuotas):                    main(resourcequota.Strategy, "status", resourcequota.StatusStrategy),
		gk(objects.PersistentVolumes):                 main(persistentvolume.Strategy, "status", persistentvolume.StatusStrategy),
		gk(objects.PersistentVolumeClaims):            main(persistentvolumeclaim.Strategy, "status", persistentvolumeclaim.StatusStrategy),
		gk(objects.Leases):                            main(lease.Strategy),
		gk(objects.RuntimeClasses):                    main(runtimeclass.Strategy),
		gk(objects.MutatingWebhookConfigurations):     main(mutatingwebhookconfiguration.Strategy),
		gk(objects.ValidatingWebhookConfigurations):   main(validatingwebhookconfiguration.Strategy),
		gk(objects.ValidatingAdmissionPolicies):       main(vap, "status", validatingadmissionpolicy.NewStatusStrategy(vap)),
		gk(objects.ValidatingAdmissionPolicyBindings): main(vapb),
		gk(objects.CustomResourceDefinitions): {scheme: apiextensionsScheme, create: crd,
			update: map[string]updateStrategy{"": crd, "status": crdStatus}},
		gk(objects.Ingresses):                  main(ingress.Strategy, "status", ingress.StatusStrategy),
		gk(objects.IngressClasses):             main(ingressclass.Strategy),
		gk(objects.NetworkPolicies):            main(networkpolicy.Strategy),
		gk(objects.ServiceCIDRs):               main(servicecidr.Strategy, "status", servicecidr.StatusStrategy),
		gk(objects.IPAddresses):                main(ipaddress.Strategy),
		gk(objects.StorageClasses):             main(storageclass.Strategy),
		gk(objects.CSIDrivers):                 main(csidriver.Strategy),
		gk(objects.CSINodes):                   main(csinode.Strategy),
		gk(objects.VolumeAttachments):          main(volumeattachment.Strategy, "status", volumeattachment.StatusStrategy),
		gk(objects.CSIStorageCapacities):       main(csistoragecapacity.Strategy),
		gk(objects.CertificateSigningRequests): main(certificates.Strategy, "status", certificates.StatusStrategy, "approval", certificates.ApprovalStrategy),
		gk(objects.FlowSchemas):                main(flowschema.Strategy, "status", flowschema.StatusStrategy),
		gk(objects.PriorityLevelConfigurations): main(prioritylevelconfiguration.Strategy, "status",
			prioritylevelconfiguration.StatusStrategy),
		gk(objects.APIServices): {scheme: apiregistrationScheme, create: apiServiceStrategy,
			update: map[string]updateStrategy{"": apiServiceStrategy, "status": apiservice.NewStatusStrategy(apiregistrationScheme)}},
	}
}

// policyGetter reads the policy a ValidatingAdmissionPolicyBinding binds,
// which its strategy reads to authorize the binding's paramRef (on the
// resource of the policy's paramKind; on every resource when the policy
// cannot be read, as kube-apiserver).
type policyGetter struct{ st *objects.Store }

func (g policyGetter) GetValidatingAdmissionPolicy(ctx context.Context, name string) (*admissionregistrationapi.ValidatingAdmissionPolicy, error) {
	if g.st == nil {
		return nil, fmt.Errorf("registry: no store to read validatingadmissionpolicies %q from", name)
	}
	obj, err := g.st.GetKind(ctx, objects.ValidatingAdmissionPolicies, "", name)
	if err != nil {
		return nil, err
	}
	in, err := toInternal(legacyscheme.Scheme, obj.(*corev1.Unstructured))
	if err != nil {
		return nil, err
	}
	return in.(*admissionregistrationapi.ValidatingAdmissionPolicy), nil
}

type noKind struct{ gvk schema.GroupVersionKind }

func (e *noKind) Error() string { return "no resource is registered for " + e.gvk.String() }

// crdStrategy is kube-apiserver's CustomResourceDefinition strategy
// with one difference: a new definition's status.conditions is an empty
// list, not null. kube-apiserver's naming and establishing controllers
// add the conditions within milliseconds, so `kubectl apply` followed by
// `kubectl wait --for condition=established` never sees the null (on
// which kubectl wait fails instead of waiting); podflow's crds stage
// takes one bus round trip longer, so the empty list keeps that wait
// waiting.
type crdStrategy struct {
	crdUpdateCreate
}

type crdUpdateCreate interface {
	rest.RESTCreateStrategy
	rest.RESTUpdateStrategy
}

func (s crdStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.crdUpdateCreate.PrepareForCreate(ctx, obj)
	if crd, ok := obj.(*apiextensions.CustomResourceDefinition); ok && crd.Status.Conditions == nil {
		crd.Status.Conditions = []apiextensions.CustomResourceDefinitionCondition{}
	}
}
