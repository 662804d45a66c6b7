package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	k8scorev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/services/objects"
)

// csrRequest is a base64 PEM certificate request for CN=alice.
const csrRequest = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlISk1ISUNBUUF3RURFT01Bd0dBMVVFQXd3RllXeHBZMlV3V1RBVEJnY3Foa2pPUFFJQkJnZ3Foa2pPUFFNQgpCd05DQUFSR0I0aDBMOGp4b3d0TThkL25kbWQ3RHp5YU5NdTFQZWhQOUVzcm52SzVhelNuUTI5bFdjeWJySVJFCjFYUWJvTjNLMGdZTlNOU0hPR3FvU0hrNnZzMEdvQUF3Q2dZSUtvWkl6ajBFQXdJRFJ3QXdSQUlnSW9SS2QvRmQKeWFFK2NWdzBlWkJtVUNhUGhkdTdJN3N0ZnVTU2lBVTdYV1FDSUVzaW5ZbEpNSTVpNDdydzAvOHdZL3Y2TXhGaAo1NllDaERXb1JMSmtZRGtZCi0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo="

const podTemplate = `template:
    metadata: {labels: {app: x}}
    spec: {containers: [{name: c, image: nginx}]}`

// minimalObjects holds one minimal valid object of every built-in generic
// kind, by resource.
var minimalObjects = map[string]string{
	"deployments.apps":         "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {app: x}}\n  " + podTemplate,
	"replicasets.apps":         "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {app: x}}\n  " + podTemplate,
	"statefulsets.apps":        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {app: x}}\n  " + podTemplate,
	"daemonsets.apps":          "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {app: x}}\n  " + podTemplate,
	"controllerrevisions.apps": "apiVersion: apps/v1\nkind: ControllerRevision\nmetadata: {name: x}\nrevision: 1\ndata: {a: b}\n",
	"jobs.batch":               "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  template:\n    spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}\n",
	"cronjobs.batch": "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: x}\nspec:\n  schedule: '*/5 * * * *'\n  jobTemplate:\n    spec:\n      template:\n" +
		"        spec: {restartPolicy: OnFailure, containers: [{name: c, image: busybox}]}\n",
	"poddisruptionbudgets.policy": "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {minAvailable: 1, selector: {matchLabels: {app: x}}}\n",
	"replicationcontrollers":      "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: x}\nspec:\n  selector: {app: x}\n  " + podTemplate,
	"podtemplates":                "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: x}\n" + strings.ReplaceAll(podTemplate, "\n  ", "\n"),
	"resourcequotas":              "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: x}\nspec: {hard: {pods: '10'}}\n",
	"persistentvolumes": "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: x}\nspec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], " +
		"hostPath: {path: /tmp/x}}\n",
	"persistentvolumeclaims": "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: x}\nspec: {accessModes: [ReadWriteOnce], " +
		"resources: {requests: {storage: 1Gi}}}\n",
	"leases.coordination.k8s.io":                                   "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: x}\nspec: {holderIdentity: me}\n",
	"runtimeclasses.node.k8s.io":                                   "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: x}\nhandler: runc\n",
	"mutatingwebhookconfigurations.admissionregistration.k8s.io":   "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: x}\n",
	"validatingwebhookconfigurations.admissionregistration.k8s.io": "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: x}\n",
	"validatingadmissionpolicies.admissionregistration.k8s.io": "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: x}\n" +
		"spec:\n  matchConstraints:\n    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]\n" +
		"  validations: [{expression: 'object.spec.replicas < 100'}]\n",
	"validatingadmissionpolicybindings.admissionregistration.k8s.io": "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\n" +
		"metadata: {name: x}\nspec: {policyName: x, validationActions: [Deny]}\n",
	"customresourcedefinitions.apiextensions.k8s.io": "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n" +
		"spec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}\n" +
		"  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]\n",
	"ingresses.networking.k8s.io": "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: x}\n" +
		"spec: {defaultBackend: {service: {name: web, port: {number: 80}}}}\n",
	"ingressclasses.networking.k8s.io":  "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: x}\nspec: {controller: example.com/ingress}\n",
	"networkpolicies.networking.k8s.io": "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: x}\nspec: {podSelector: {}}\n",
	"servicecidrs.networking.k8s.io":    "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: x}\nspec: {cidrs: [10.200.0.0/24]}\n",
	"ipaddresses.networking.k8s.io": "apiVersion: networking.k8s.io/v1\nkind: IPAddress\nmetadata: {name: 10.200.0.7}\n" +
		"spec: {parentRef: {resource: services, namespace: default, name: web}}\n",
	"storageclasses.storage.k8s.io": "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: x}\nprovisioner: example.com/x\n",
	"csidrivers.storage.k8s.io":     "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: csi.example.com}\nspec: {}\n",
	"csinodes.storage.k8s.io":       "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: node-1}\nspec: {drivers: []}\n",
	"volumeattachments.storage.k8s.io": "apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {name: x}\n" +
		"spec: {attacher: csi.example.com, nodeName: node-1, source: {persistentVolumeName: x}}\n",
	"csistoragecapacities.storage.k8s.io": "apiVersion: storage.k8s.io/v1\nkind: CSIStorageCapacity\nmetadata: {name: x}\nstorageClassName: x\n",
	"certificatesigningrequests.certificates.k8s.io": "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {name: x}\n" +
		"spec: {signerName: example.com/x, usages: [digital signature], request: " + csrRequest + "}\n",
	"flowschemas.flowcontrol.apiserver.k8s.io": "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: x}\n" +
		"spec: {priorityLevelConfiguration: {name: x}, matchingPrecedence: 1000}\n",
	"prioritylevelconfigurations.flowcontrol.apiserver.k8s.io": "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n" +
		"metadata: {name: x}\nspec: {type: Limited, limited: {nominalConcurrencyShares: 10, limitResponse: {type: Reject}}}\n",
	"horizontalpodautoscalers.autoscaling": "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: x}\n" +
		"spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: x}, maxReplicas: 3}\n",
	"apiservices.apiregistration.k8s.io": "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.x.example.com}\n" +
		"spec: {group: x.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 10, insecureSkipTLSVerify: true, service: {namespace: default, name: x}}\n",
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// restConfig is the admin's client-go configuration, without client-go's
// client-side rate limit (5 requests a second, bursts of 10: a test of a
// few dozen requests would wait on it for seconds, not on the server).
func restConfig(s *system) *rest.Config {
	return &rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}, QPS: -1}
}

func unstructuredOf(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestGenericKindsCRUD: every built-in generic kind is served through
// HTTPS — create, get, list, watch, update, delete with client-go's
// dynamic client — and discovered as kube-apiserver lists it.
func TestGenericKindsCRUD(t *testing.T) {
	s := startSystem(t, options{})
	cfg := restConfig(s)
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := cs.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	discovered := map[string]metav1.APIResource{}
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			discovered[(schema.GroupResource{Group: gv.Group, Resource: r.Name}).String()] = r
		}
	}
	seen := 0
	for _, k := range objects.Kinds() {
		if !k.Generic || strings.HasSuffix(k.APIGroup, ".test.io") {
			continue
		}
		seen++
		y, ok := minimalObjects[k.Qualified()]
		if !ok {
			t.Errorf("no minimal object of %s", k.Qualified())
			continue
		}
		t.Run(k.Qualified(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ar, ok := discovered[k.Qualified()]
			if !ok || ar.Namespaced != k.Namespaced || ar.Kind != k.Name || strings.Join(ar.ShortNames, ",") != strings.Join(k.ShortNames, ",") ||
				strings.Join(ar.Categories, ",") != strings.Join(k.Categories, ",") {
				t.Fatalf("discovery %+v", ar)
			}
			for _, sub := range k.Subresources {
				if _, ok := discovered[(schema.GroupResource{Group: k.APIGroup, Resource: k.Resource + "/" + sub}).String()]; !ok {
					t.Errorf("discovery lacks %s/%s", k.Resource, sub)
				}
			}
			gvr := schema.GroupVersionResource{Group: k.APIGroup, Version: k.Version, Resource: k.Resource}
			var ri dynamic.ResourceInterface = dc.Resource(gvr)
			if k.Namespaced {
				ri = dc.Resource(gvr).Namespace("default")
			}
			obj := unstructuredOf(t, y)
			name := obj.GetName()
			w, err := ri.Watch(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			created, err := ri.Create(ctx, obj, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if created.GetUID() == "" || created.GetResourceVersion() == "" || created.GetCreationTimestamp().Time.IsZero() {
				t.Fatalf("created %v", created.Object["metadata"])
			}
			want := "[ADDED MODIFIED DELETED]"
			if k.Resource == "resourcequotas" {
				// The resourcequota controller fills in status.hard and
				// status.used: one more MODIFIED, waited for so that the
				// update below does not race it.
				want = "[ADDED MODIFIED MODIFIED DELETED]"
				for {
					q, err := ri.Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if hard, _, _ := unstructured.NestedMap(q.Object, "status", "hard"); len(hard) > 0 {
						break
					}
					if ctx.Err() != nil {
						t.Fatalf("the quota's status was not filled in: %v", q.Object["status"])
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if k.Name == "CustomResourceDefinition" {
				// The CRD controller accepts the names, then sets
				// Established, its last write: waited for so that the
				// update below does not race it.
				for {
					d, err := ri.Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					conds, _, _ := unstructured.NestedSlice(d.Object, "status", "conditions")
					if slices.ContainsFunc(conds, func(c any) bool {
						m, _ := c.(map[string]any)
						return m["type"] == "Established" && m["status"] == "True"
					}) {
						break
					}
					if ctx.Err() != nil {
						t.Fatalf("the definition was not established: %v", d.Object["status"])
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
				t.Fatalf("second create: %v, want AlreadyExists", err)
			}
			got, err := ri.Get(ctx, name, metav1.GetOptions{})
			if err != nil || got.GetUID() != created.GetUID() {
				t.Fatalf("get: %v %v", got, err)
			}
			l, err := ri.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			if err != nil || len(l.Items) != 1 || l.Items[0].GetName() != name {
				t.Fatalf("list: %v %v", l, err)
			}
			got.SetLabels(map[string]string{"tier": "front"})
			updated, err := ri.Update(ctx, got, metav1.UpdateOptions{})
			if err != nil || updated.GetLabels()["tier"] != "front" || updated.GetUID() != created.GetUID() {
				t.Fatalf("update: %v %v", updated, err)
			}
			if updated.GetGeneration() != created.GetGeneration() {
				t.Errorf("a label changed generation %d to %d", created.GetGeneration(), updated.GetGeneration())
			}
			l, err = ri.List(ctx, metav1.ListOptions{LabelSelector: "tier=front"})
			if err != nil || len(l.Items) != 1 {
				t.Fatalf("list by label: %v %v", l, err)
			}
			// Background: with no policy a ReplicationController (v1) or a
			// Job (batch/v1) would only be marked with the orphan finalizer,
			// their kinds' default (TestDeletePropagationPolicy).
			background := metav1.DeletePropagationBackground
			if err := ri.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			// A CustomResourceDefinition is deleted asynchronously: marked
			// with its cleanup finalizer, then removed by the CRD
			// controller (MODIFIED events between).
			async := k.Name == "CustomResourceDefinition"
			for {
				_, err := ri.Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					break
				}
				if !async || ctx.Err() != nil {
					t.Fatalf("get after delete: %v, want NotFound", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			var events []watch.EventType
			for len(events) == 0 || events[len(events)-1] != watch.Deleted {
				select {
				case ev := <-w.ResultChan():
					if u, ok := ev.Object.(*unstructured.Unstructured); ok && u.GetName() == name {
						events = append(events, ev.Type)
					}
				case <-ctx.Done():
					t.Fatalf("watch saw %v", events)
				}
			}
			if async && len(events) > 3 && events[2] == watch.Modified {
				events = append(events[:2], watch.Deleted) // the marks on the way
			}
			if fmt.Sprint(events) != want {
				t.Fatalf("watch saw %v", events)
			}
		})
	}
	if seen != len(minimalObjects) {
		t.Errorf("%d generic kinds, %d minimal objects", seen, len(minimalObjects))
	}

	// deletecollection by label.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leases := dc.Resource(schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}).Namespace("default")
	for _, n := range []string{"a", "b", "keep"} {
		l := unstructuredOf(t, strings.Replace(minimalObjects["leases.coordination.k8s.io"], "name: x", "name: "+n, 1))
		if n != "keep" {
			l.SetLabels(map[string]string{"doomed": "yes"})
		}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "doomed=yes"}); err != nil {
		t.Fatalf("deletecollection: %v", err)
	}
	if l, err := leases.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 || l.Items[0].GetName() != "keep" {
		t.Fatalf("after deletecollection: %v %v", l, err)
	}
}

func webDeployment(name string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: k8scorev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "web", Image: "nginx"}}}}}}
}

// TestDeploymentSemantics: a Deployment through HTTPS behaves as
// kube-apiserver's — its defaults, its validation message, status kept
// by a spec update and spec kept by a status update, the generation
// counting spec changes only, and its scale subresource.
func TestDeploymentSemantics(t *testing.T) {
	s := startSystem(t, options{})
	cs, err := kubernetes.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deps := cs.AppsV1().Deployments("default")

	d, err := deps.Create(ctx, webDeployment("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		d.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" || d.Spec.Strategy.RollingUpdate.MaxUnavailable.String() != "25%" ||
		*d.Spec.RevisionHistoryLimit != 10 || *d.Spec.ProgressDeadlineSeconds != 600 || d.Generation != 1 {
		t.Fatalf("defaults: generation %d %+v", d.Generation, d.Spec)
	}

	t.Run("invalid", func(t *testing.T) {
		bad := webDeployment("bad")
		bad.Spec.Template.Labels = map[string]string{"app": "other"}
		_, err := deps.Create(ctx, bad, metav1.CreateOptions{})
		const msg = "Deployment.apps \"bad\" is invalid: spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`"
		var se *apierrors.StatusError
		if !apierrors.IsInvalid(err) || !errorsAs(err, &se) || se.ErrStatus.Message != msg || se.ErrStatus.Details == nil ||
			len(se.ErrStatus.Details.Causes) != 1 || se.ErrStatus.Details.Causes[0].Field != "spec.template.metadata.labels" {
			t.Fatalf("create: %v\nwant %s", err, msg)
		}
		if _, err := deps.Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("an invalid Deployment was stored: %v", err)
		}
	})

	t.Run("status and spec", func(t *testing.T) {
		cur, _ := deps.Get(ctx, "web", metav1.GetOptions{})
		cur.Status.Replicas, cur.Status.ReadyReplicas, cur.Status.ObservedGeneration = 1, 1, 1
		three := int32(3)
		cur.Spec.Replicas = &three
		st, err := deps.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *st.Spec.Replicas != 1 || st.Status.ReadyReplicas != 1 || st.Generation != 1 {
			t.Fatalf("status update: replicas %d readyReplicas %d generation %d; want 1, 1, 1", *st.Spec.Replicas, st.Status.ReadyReplicas, st.Generation)
		}
		st.Spec.Replicas = &three
		st.Status.ReadyReplicas = 0
		up, err := deps.Update(ctx, st, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *up.Spec.Replicas != 3 || up.Status.ReadyReplicas != 1 || up.Generation != 2 {
			t.Fatalf("spec update: replicas %d readyReplicas %d generation %d; want 3, 1, 2", *up.Spec.Replicas, up.Status.ReadyReplicas, up.Generation)
		}
		up.Labels = map[string]string{"tier": "front"}
		if up, err = deps.Update(ctx, up, metav1.UpdateOptions{}); err != nil || up.Generation != 2 {
			t.Fatalf("label update: generation %d, %v; want 2", up.Generation, err)
		}
	})

	t.Run("scale", func(t *testing.T) {
		sc, err := deps.GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sc.Spec.Replicas != 3 || sc.Status.Replicas != 1 || sc.Status.Selector != "app=web" || sc.Name != "web" || sc.UID != d.UID {
			t.Fatalf("scale %+v", sc)
		}
		sc.Spec.Replicas = 5
		if sc, err = deps.UpdateScale(ctx, "web", sc, metav1.UpdateOptions{}); err != nil || sc.Spec.Replicas != 5 {
			t.Fatalf("update scale: %v %v", sc, err)
		}
		d, _ := deps.Get(ctx, "web", metav1.GetOptions{})
		if *d.Spec.Replicas != 5 || d.Generation != 3 || d.Status.ReadyReplicas != 1 {
			t.Fatalf("after scale: replicas %d generation %d readyReplicas %d", *d.Spec.Replicas, d.Generation, d.Status.ReadyReplicas)
		}
		if _, err := deps.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}, "scale"); err != nil {
			t.Fatalf("patch scale: %v", err)
		}
		sc.Spec.Replicas = -1
		sc.ResourceVersion = ""
		_, err = deps.UpdateScale(ctx, "web", sc, metav1.UpdateOptions{})
		const msg = `Scale.autoscaling "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0`
		if !apierrors.IsInvalid(err) || err.Error() != msg {
			t.Fatalf("scale to -1: %v\nwant %s", err, msg)
		}
		sc.Spec.Replicas, sc.ResourceVersion = 4, "1"
		if _, err := deps.UpdateScale(ctx, "web", sc, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Fatalf("scale at an old resourceVersion: %v, want Conflict", err)
		}
		if d, _ := deps.Get(ctx, "web", metav1.GetOptions{}); *d.Spec.Replicas != 2 {
			t.Fatalf("replicas %d after refused scales, want 2", *d.Spec.Replicas)
		}
		if _, err := cs.BatchV1().Jobs("default").Create(ctx, unstructuredJob(t), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		code, _, _ := do(t, s.client(t, adminToken), "GET", s.url+"/apis/batch/v1/namespaces/default/jobs/pi/scale", "", "")
		if code != http.StatusNotFound {
			t.Fatalf("jobs/scale: %d, want 404", code)
		}
	})

	t.Run("table", func(t *testing.T) {
		code, body, _ := do(t, s.client(t, adminToken), "GET", s.url+"/apis/apps/v1/namespaces/default/deployments", "", "",
			"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		var names []string
		cols, _ := body["columnDefinitions"].([]any)
		for _, c := range cols {
			names = append(names, c.(map[string]any)["name"].(string))
		}
		rows, _ := body["rows"].([]any)
		if code != 200 || strings.Join(names, ",") != "Name,Ready,Up-to-date,Available,Age,Containers,Images,Selector" || len(rows) != 1 {
			t.Fatalf("table %d %v", code, body)
		}
		cells := rows[0].(map[string]any)["cells"].([]any)
		if fmt.Sprintf("%v %v %v %v %v", cells[0], cells[1], cells[5], cells[6], cells[7]) != "web 1/2 web nginx app=web" {
			t.Fatalf("cells %v", cells)
		}
	})
}

func unstructuredJob(t *testing.T) *batchv1.Job {
	t.Helper()
	j := &batchv1.Job{}
	if err := yaml.Unmarshal([]byte(strings.Replace(minimalObjects["jobs.batch"], "name: x", "name: pi", 1)), j); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestGenericWarnings: a strategy's warnings reach the client as Warning
// headers, as kube-apiserver's.
func TestGenericWarnings(t *testing.T) {
	s := startSystem(t, options{})
	d := webDeployment("warned")
	d.Spec.Template.Annotations = map[string]string{"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"}
	d.APIVersion, d.Kind = "apps/v1", "Deployment"
	b, _ := json.Marshal(d)
	code, body, hdr := do(t, s.client(t, adminToken), "POST", s.url+"/apis/apps/v1/namespaces/default/deployments", "application/json", string(b))
	if code != 201 || !strings.Contains(strings.Join(hdr.Values("Warning"), "|"), "non-functional") {
		t.Fatalf("create: %d warnings %q %v", code, hdr.Values("Warning"), body)
	}
}

// TestProtobufBodies: client-go speaking protobuf only (requests and
// answers) creates and reads a Deployment and a PriorityClass, and the
// answers are protobuf.
func TestProtobufBodies(t *testing.T) {
	s := startSystem(t, options{})
	cfg := restConfig(s)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	var ct []string
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				ct = append(ct, r.Method+" "+resp.Header.Get("Content-Type"))
			}
			return resp, err
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, webDeployment("pb"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	d, err := cs.AppsV1().Deployments("default").Get(ctx, "pb", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 1 || d.Spec.Template.Spec.Containers[0].Image != "nginx" {
		t.Fatalf("get Deployment: %v %v", d, err)
	}
	l, err := cs.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.ResourceVersion == "" {
		t.Fatalf("list Deployments: %v %v", l, err)
	}
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000, Description: "high"}
	if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PriorityClass: %v", err)
	}
	if got, err := cs.SchedulingV1().PriorityClasses().Get(ctx, "high", metav1.GetOptions{}); err != nil || got.Value != 1000 {
		t.Fatalf("get PriorityClass: %v %v", got, err)
	}
	sc, err := cs.AppsV1().Deployments("default").GetScale(ctx, "pb", metav1.GetOptions{})
	if err != nil || sc.Spec.Replicas != 1 {
		t.Fatalf("get scale: %v %v", sc, err)
	}
	if len(ct) != 6 {
		t.Fatalf("answers %q", ct)
	}
	for _, c := range ct {
		if !strings.HasSuffix(c, " application/vnd.kubernetes.protobuf") {
			t.Fatalf("answers %q: not all protobuf", ct)
		}
	}
	// A watch is answered in JSON, which the protobuf client reads.
	w, err := cs.AppsV1().Deployments("default").Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := cs.AppsV1().Deployments("default").Patch(ctx, "pb", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if d, ok := ev.Object.(*appsv1.Deployment); !ok || ev.Type != watch.Modified || d.Labels["x"] != "y" {
			t.Fatalf("watch event %s %T", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDeploymentServerSideApply: two managers apply a Deployment; the
// second conflicts over replicas until it forces.
func TestDeploymentServerSideApply(t *testing.T) {
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	url := s.url + "/apis/apps/v1/namespaces/default/deployments/ssa"
	apply := func(manager string, replicas int, force bool) (int, map[string]any) {
		y := fmt.Sprintf("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ssa}\nspec:\n  replicas: %d\n  selector: {matchLabels: {app: ssa}}\n"+
			"  template:\n    metadata: {labels: {app: ssa}}\n    spec: {containers: [{name: web, image: nginx}]}\n", replicas)
		q := "?fieldManager=" + manager
		if force {
			q += "&force=true"
		}
		code, body, _ := do(t, admin, "PATCH", url+q, "application/apply-patch+yaml", y)
		return code, body
	}
	if code, body := apply("alice", 2, false); code != 201 || path(body, "spec.replicas") != float64(2) || path(body, "spec.revisionHistoryLimit") != float64(10) {
		t.Fatalf("first apply: %d %v", code, body)
	}
	if code, body := apply("alice", 2, false); code != 200 || strings.Join(managers(body), ",") != "alice/Apply" {
		t.Fatalf("re-apply: %d %v", code, managers(body))
	}
	code, body := apply("bob", 4, false)
	causes, _ := path(body, "details.causes").([]any)
	if code != 409 || len(causes) != 1 || path(causes[0].(map[string]any), "field") != ".spec.replicas" {
		t.Fatalf("bob's conflicting apply: %d %v", code, body)
	}
	if code, body := apply("bob", 4, true); code != 200 || path(body, "spec.replicas") != float64(4) || path(body, "metadata.generation") != float64(2) {
		t.Fatalf("bob's forced apply: %d %v", code, body)
	}
}

// TestKubectlDeployments drives the stock kubectl: create deployment, get
// deploy (kube-apiserver's columns), scale, explain.
func TestKubectlDeployments(t *testing.T) {
	s := startSystem(t, options{})
	k := newStockKubectl(t, s)
	if out := k.must("", "create", "deployment", "web", "--image=nginx", "--replicas=2"); !strings.Contains(out, "deployment.apps/web created") {
		t.Fatalf("create: %q", out)
	}
	out := k.must("", "get", "deploy")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "READY") || !strings.Contains(out, "UP-TO-DATE") ||
		!strings.Contains(out, "AVAILABLE") || !strings.Contains(out, "web    0/2") {
		t.Fatalf("get deploy:\n%s", out)
	}
	if out := k.must("", "scale", "deployment", "web", "--replicas=4"); !strings.Contains(out, "deployment.apps/web scaled") {
		t.Fatalf("scale: %q", out)
	}
	if out := k.must("", "get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"); out != "4" {
		t.Fatalf("replicas after scale: %q", out)
	}
	if out := k.must("", "explain", "deployment.spec"); !strings.Contains(out, "KIND:       Deployment") || !strings.Contains(out, "revisionHistoryLimit") {
		t.Fatalf("explain:\n%s", out)
	}
	y := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: applied}\nspec:\n  selector: {matchLabels: {app: a}}\n" +
		"  template:\n    metadata: {labels: {app: a}}\n    spec: {containers: [{name: web, image: nginx}]}\n"
	if out := k.must(y, "apply", "--server-side", "-f", "-"); !strings.Contains(out, "deployment.apps/applied serverside-applied") {
		t.Fatalf("apply --server-side: %q", out)
	}
	if out := k.must("", "get", "all"); !strings.Contains(out, "deployment.apps/web") {
		t.Fatalf("get all:\n%s", out)
	}
}

// TestDiscoveryGroups: /apis lists every served group, in kube-apiserver's
// order (scheduling.k8s.io included), legacy and aggregated; aggregated
// discovery lists a Deployment's subresources with their kinds.
func TestDiscoveryGroups(t *testing.T) {
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	code, body, _ := do(t, admin, "GET", s.url+"/apis", "", "")
	var groups []string
	for _, g := range body["groups"].([]any) {
		groups = append(groups, g.(map[string]any)["name"].(string))
	}
	want := "apiregistration.k8s.io,apps,events.k8s.io,authentication.k8s.io,authorization.k8s.io,autoscaling,batch,certificates.k8s.io,networking.k8s.io,policy," +
		"rbac.authorization.k8s.io,storage.k8s.io,admissionregistration.k8s.io,apiextensions.k8s.io,scheduling.k8s.io,coordination.k8s.io," +
		"node.k8s.io,discovery.k8s.io,flowcontrol.apiserver.k8s.io,metrics.k8s.io"
	if code != 200 || strings.Join(groups, ",") != want {
		t.Fatalf("/apis: %d\n got %s\nwant %s", code, strings.Join(groups, ","), want)
	}
	code, body, _ = do(t, admin, "GET", s.url+"/apis", "", "", "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	var agg []string
	var subs []string
	for _, g := range body["items"].([]any) {
		gm := g.(map[string]any)
		agg = append(agg, path(gm, "metadata.name").(string))
		for _, v := range gm["versions"].([]any) {
			for _, r := range v.(map[string]any)["resources"].([]any) {
				rm := r.(map[string]any)
				if rm["resource"] != "deployments" {
					continue
				}
				for _, sr := range rm["subresources"].([]any) {
					sm := sr.(map[string]any)
					rk := sm["responseKind"].(map[string]any)
					subs = append(subs, fmt.Sprintf("%s:%s/%s/%s", sm["subresource"], rk["group"], rk["version"], rk["kind"]))
				}
			}
		}
	}
	if code != 200 || strings.Join(agg, ",") != want || strings.Join(subs, ",") != "status:apps/v1/Deployment,scale:autoscaling/v1/Scale" {
		t.Fatalf("aggregated /apis: %d groups %v deployments' subresources %v", code, agg, subs)
	}
	code, body, _ = do(t, admin, "GET", s.url+"/apis/scheduling.k8s.io", "", "")
	if code != 200 || path(body, "preferredVersion.groupVersion") != "scheduling.k8s.io/v1" {
		t.Fatalf("/apis/scheduling.k8s.io: %d %v", code, body)
	}
}

// TestCSRApproval: a CertificateSigningRequest's conditions are written
// through /approval (kube-apiserver's approval strategy), never through
// the object itself, which records the requester.
func TestCSRApproval(t *testing.T) {
	s := startSystem(t, options{})
	cs, err := kubernetes.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	req := &certificatesv1.CertificateSigningRequest{}
	if err := yaml.Unmarshal([]byte(minimalObjects["certificatesigningrequests.certificates.k8s.io"]), req); err != nil {
		t.Fatal(err)
	}
	req.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: k8scorev1.ConditionTrue}}
	c, err := csrs.Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.Username != "admin" || len(c.Status.Conditions) != 0 {
		t.Fatalf("created: username %q conditions %v; want admin, none", c.Spec.Username, c.Status.Conditions)
	}
	approved := certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: k8scorev1.ConditionTrue,
		Reason: "Test", Message: "approved by the test"}
	c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{approved}
	if up, err := csrs.Update(ctx, c, metav1.UpdateOptions{}); err != nil || len(up.Status.Conditions) != 0 {
		t.Fatalf("update with conditions: %v %v; want them dropped", up.Status.Conditions, err)
	}
	c, _ = csrs.Get(ctx, c.Name, metav1.GetOptions{})
	c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{approved}
	up, err := csrs.UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
	if err != nil || len(up.Status.Conditions) != 1 || up.Status.Conditions[0].Type != certificatesv1.CertificateApproved ||
		up.Status.Conditions[0].LastUpdateTime.IsZero() {
		t.Fatalf("approval: %v %v", up, err)
	}
}

// TestGenericStrictFields: under fieldValidation=Strict a typed object's
// unknown and duplicate fields are refused together, in document order,
// worded as kube-apiserver's (the FieldValidation conformance test).
func TestGenericStrictFields(t *testing.T) {
	s := startSystem(t, options{})
	body := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"my-dep","labels":{"app":"nginx"}},
"spec":{"unknownField":"foo","replicas":2,"replicas":3,"selector":{"matchLabels":{"app":"nginx"}},
"template":{"metadata":{"labels":{"app":"nginx"}},"spec":{"containers":[{"name":"nginx","image":"nginx:latest"}]}}}}`
	code, out, _ := do(t, s.client(t, adminToken), "POST", s.url+"/apis/apps/v1/namespaces/default/deployments?fieldValidation=Strict", "application/json", body)
	const want = `strict decoding error: unknown field "spec.unknownField", duplicate field "spec.replicas"`
	if msg, _ := out["message"].(string); code != 400 || !strings.Contains(msg, want) {
		t.Fatalf("%d %v\nwant %s", code, out, want)
	}
}
