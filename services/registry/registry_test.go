package registry_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/kubernetes/pkg/apis/core"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	rbacapi "k8s.io/kubernetes/pkg/apis/rbac"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/validate"
)

var ctx = context.Background()

func decode(t *testing.T, y string) *corev1.Unstructured {
	t.Helper()
	objs, err := manifest.Decode([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return objs[0].Message.(*corev1.Unstructured)
}

func kube[T runtime.Object](t *testing.T, u *corev1.Unstructured) T {
	t.Helper()
	k, err := manifest.ToKube(u)
	if err != nil {
		t.Fatal(err)
	}
	return k.(T)
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
status: {replicas: 7}
`

var alice = &corev1.UserInfo{Username: "alice", Uid: "a-1", Groups: []string{"dev", "system:authenticated"}}

// TestCreateDefaultsAndPrepares: a Deployment is created as
// kube-apiserver creates one — v1 defaults, uid, creationTimestamp,
// generation 1, status reset.
func TestCreateDefaultsAndPrepares(t *testing.T) {
	r := registry.Default()
	u := decode(t, deployment)
	if _, st := r.PrepareCreate(ctx, alice, "", u); st != nil {
		t.Fatalf("PrepareCreate: %v", st)
	}
	d := kube[*appsv1.Deployment](t, u)
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		d.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" || d.Spec.Strategy.RollingUpdate.MaxUnavailable.String() != "25%" ||
		*d.Spec.RevisionHistoryLimit != 10 || *d.Spec.ProgressDeadlineSeconds != 600 {
		t.Errorf("defaults: %+v", d.Spec)
	}
	if d.Spec.Template.Spec.RestartPolicy != "Always" || d.Spec.Template.Spec.Containers[0].TerminationMessagePath != "/dev/termination-log" {
		t.Errorf("pod template defaults: %+v", d.Spec.Template.Spec)
	}
	if d.UID == "" || d.CreationTimestamp.IsZero() || d.Generation != 1 || d.Status.Replicas != 0 {
		t.Errorf("system fields: uid %q created %v generation %d status %+v", d.UID, d.CreationTimestamp, d.Generation, d.Status)
	}
}

// TestCreatePersistentVolumeClaimPending: a new PersistentVolumeClaim
// reads back with status.phase Pending, a PersistentVolume with Pending,
// as from kube-apiserver (its PVC strategy clears the status, its storage
// defaults the phase on every read); the sig-storage conformance test
// "should apply changes to a pv/pvc status" reads both.
func TestCreatePersistentVolumeClaimPending(t *testing.T) {
	r := registry.Default()
	pvc := decode(t, `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: team}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
status: {phase: Bound}
`)
	if _, st := r.PrepareCreate(ctx, alice, "", pvc); st != nil {
		t.Fatalf("PrepareCreate: %v", st)
	}
	if got := kube[*k8scorev1.PersistentVolumeClaim](t, pvc).Status.Phase; got != k8scorev1.ClaimPending {
		t.Errorf("a new claim's phase %q, want Pending", got)
	}
	pv := decode(t, `apiVersion: v1
kind: PersistentVolume
metadata: {name: pv1}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  csi: {driver: e2e-driver, volumeHandle: h}
`)
	if _, st := r.PrepareCreate(ctx, alice, "", pv); st != nil {
		t.Fatalf("PrepareCreate: %v", st)
	}
	if got := kube[*k8scorev1.PersistentVolume](t, pv).Status.Phase; got != k8scorev1.VolumePending {
		t.Errorf("a new volume's phase %q, want Pending", got)
	}
}

// TestCreateInvalid: an invalid object is kube-apiserver's 422 with its
// message and a cause per field error.
func TestCreateInvalid(t *testing.T) {
	r := registry.Default()
	u := decode(t, strings.Replace(deployment, "labels: {app: web}", "labels: {app: other}", 1))
	_, st := r.PrepareCreate(ctx, nil, "", u)
	if st.GetCode() != 422 || st.GetReason() != "Invalid" || st.GetKind() != "Deployment" || st.GetName() != "web" {
		t.Fatalf("status %v", st)
	}
	const msg = "Deployment.apps \"web\" is invalid: spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`"
	if st.GetMessage() != msg {
		t.Errorf("message\n got %s\nwant %s", st.GetMessage(), msg)
	}
	if len(st.GetCauses()) != 1 || st.GetCauses()[0].GetField() != "spec.template.metadata.labels" || st.GetCauses()[0].GetType() != "FieldValueInvalid" {
		t.Errorf("causes %v", st.GetCauses())
	}
	// A name kube-apiserver refuses, whatever podflow's own rules.
	u = decode(t, strings.Replace(deployment, "name: web,", "name: Web_1,", 1))
	if _, st := r.PrepareCreate(ctx, nil, "", u); st.GetCode() != 422 || !strings.Contains(st.GetMessage(), "metadata.name: Invalid value: \"Web_1\"") {
		t.Errorf("bad name: %v", st)
	}
}

func created(t *testing.T, y string) *corev1.Unstructured {
	t.Helper()
	u := decode(t, y)
	if _, st := registry.Default().PrepareCreate(ctx, alice, "", u); st != nil {
		t.Fatal(st)
	}
	u.Metadata.ResourceVersion = "5"
	return u
}

// TestUpdateGenerationAndStatus: a spec change bumps the generation, a
// label change does not; an update of the object keeps the stored
// status, an update of status keeps the stored spec and labels.
func TestUpdateGenerationAndStatus(t *testing.T) {
	r := registry.Default()
	old := created(t, deployment)

	relabel := proto.CloneOf(old)
	relabel.Metadata.Labels = map[string]string{"tier": "front"}
	if _, st := r.PrepareUpdate(ctx, nil, "", relabel, old); st != nil {
		t.Fatal(st)
	}
	if g := relabel.GetMetadata().GetGeneration(); g != 1 {
		t.Errorf("label change: generation %d, want 1", g)
	}

	d := kube[*appsv1.Deployment](t, old)
	three := int32(3)
	d.Spec.Replicas = &three
	d.Status.ReadyReplicas = 9
	spec := fromKube(t, d)
	if _, st := r.PrepareUpdate(ctx, nil, "", spec, old); st != nil {
		t.Fatal(st)
	}
	got := kube[*appsv1.Deployment](t, spec)
	if got.Generation != 2 || *got.Spec.Replicas != 3 || got.Status.ReadyReplicas != 0 {
		t.Errorf("spec update: generation %d replicas %d readyReplicas %d; want 2, 3, 0", got.Generation, *got.Spec.Replicas, got.Status.ReadyReplicas)
	}

	d = kube[*appsv1.Deployment](t, old)
	d.Spec.Replicas = &three
	d.Status.Replicas, d.Status.ReadyReplicas = 4, 4
	d.Labels = map[string]string{"sneaky": "yes"}
	status := fromKube(t, d)
	if _, st := r.PrepareUpdate(ctx, nil, "status", status, old); st != nil {
		t.Fatal(st)
	}
	got = kube[*appsv1.Deployment](t, status)
	if got.Generation != 1 || *got.Spec.Replicas != 1 || got.Status.ReadyReplicas != 4 || got.Labels["sneaky"] != "" {
		t.Errorf("status update: generation %d replicas %d readyReplicas %d labels %v; want 1, 1, 4, none",
			got.Generation, *got.Spec.Replicas, got.Status.ReadyReplicas, got.Labels)
	}

	// An update without a resourceVersion is unconditional (the
	// Deployment strategy allows it): it takes the stored version.
	blind := proto.CloneOf(old)
	blind.Metadata.ResourceVersion = ""
	blind.Metadata.Labels = map[string]string{"tier": "back"}
	if old.GetMetadata().GetResourceVersion() == "" {
		t.Fatal("the stored deployment has no resourceVersion: the unconditional update proves nothing")
	}
	if _, st := r.PrepareUpdate(ctx, nil, "", blind, old); st != nil || blind.GetMetadata().GetResourceVersion() != old.GetMetadata().GetResourceVersion() {
		t.Errorf("update without resourceVersion: %v, resourceVersion %q", st, blind.GetMetadata().GetResourceVersion())
	}

	// A changed uid is refused, as kube-apiserver refuses it.
	moved := proto.CloneOf(old)
	moved.Metadata.Uid = "other"
	if _, st := r.PrepareUpdate(ctx, nil, "", moved, old); st.GetCode() != 422 || !strings.Contains(st.GetMessage(), "metadata.uid: Invalid value: \"other\": field is immutable") {
		t.Errorf("uid change: %v", st)
	}
	if _, st := r.PrepareUpdate(ctx, nil, "nope", proto.CloneOf(old), old); st.GetCode() != 404 {
		t.Errorf("unknown subresource: %v", st)
	}
}

func fromKube(t *testing.T, o runtime.Object) *corev1.Unstructured {
	t.Helper()
	m, err := manifest.FromKube(o)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*corev1.Unstructured)
}

// TestScaleValidated: a write through scale is validated as a Scale
// first.
func TestScaleValidated(t *testing.T) {
	old := created(t, deployment)
	d := kube[*appsv1.Deployment](t, old)
	minus := int32(-1)
	d.Spec.Replicas = &minus
	_, st := registry.Default().PrepareUpdate(ctx, nil, "scale", fromKube(t, d), old)
	const msg = `Scale.autoscaling "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0`
	if st.GetCode() != 422 || st.GetMessage() != msg {
		t.Fatalf("scale -1: %v\nwant %s", st, msg)
	}
}

// TestJobSelectorGenerated: a Job gets the selector and labels
// kube-apiserver generates from its uid.
func TestJobSelectorGenerated(t *testing.T) {
	u := created(t, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: pi, namespace: ns}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: pi, image: perl}]\n")
	j := kube[*batchv1.Job](t, u)
	if j.Spec.Selector == nil || j.Spec.Selector.MatchLabels["batch.kubernetes.io/controller-uid"] != string(j.UID) ||
		j.Spec.Template.Labels["batch.kubernetes.io/job-name"] != "pi" || *j.Spec.BackoffLimit != 6 || *j.Spec.Completions != 1 {
		t.Fatalf("job %+v", j.Spec)
	}
}

// TestCSRRequester: a CertificateSigningRequest records who asked, from
// the request's user.
func TestCSRRequester(t *testing.T) {
	const csr = "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {name: c}\nspec:\n  signerName: example.com/x\n  usages: [digital signature]\n  request: " + csrPEM + "\n"
	u := created(t, csr)
	c := kube[*certificatesv1.CertificateSigningRequest](t, u)
	if c.Spec.Username != "alice" || c.Spec.UID != "a-1" || len(c.Spec.Groups) != 2 {
		t.Fatalf("requester %q %q %v", c.Spec.Username, c.Spec.UID, c.Spec.Groups)
	}
}

// TestWarnings: a strategy's warnings come back for the client.
func TestWarnings(t *testing.T) {
	u := decode(t, strings.Replace(deployment, "metadata: {labels: {app: web}}",
		"metadata: {labels: {app: web}, annotations: {seccomp.security.alpha.kubernetes.io/pod: runtime/default}}", 1))
	warnings, st := registry.Default().PrepareCreate(ctx, nil, "", u)
	if st != nil || len(warnings) == 0 || !strings.Contains(warnings[0], "non-functional") {
		t.Fatalf("warnings %q, %v", warnings, st)
	}
}

// TestParamKindAuthorized: a ValidatingAdmissionPolicy with a paramKind
// needs read access to it (the strategy's own authorization), through
// the authorizer the Config gives.
func TestParamKindAuthorized(t *testing.T) {
	var asked []auth.Attributes
	r, err := registry.New(registry.Config{Authorize: func(a auth.Attributes) auth.Decision {
		asked = append(asked, a)
		return auth.Decision{Allowed: a.Resource == "configmaps"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	vap := func(kind string) *corev1.Unstructured {
		return decode(t, "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\nspec:\n  paramKind: {apiVersion: v1, kind: "+kind+"}\n  matchConstraints:\n    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]\n  validations: [{expression: 'true'}]\n")
	}
	if _, st := r.PrepareCreate(ctx, alice, "", vap("ConfigMap")); st != nil {
		t.Fatalf("ConfigMap params: %v", st)
	}
	_, st := r.PrepareCreate(ctx, alice, "", vap("Secret"))
	if st.GetCode() != 422 || !strings.Contains(st.GetMessage(), "spec.paramKind: Forbidden") {
		t.Fatalf("Secret params: %v", st)
	}
	if len(asked) != 2 || asked[1].Resource != "secrets" || asked[1].User.GetUsername() != "alice" {
		t.Fatalf("asked %v", asked)
	}
}

// TestEveryGenericKindHasStrategies: each built-in generic kind is
// prepared by kube-apiserver's strategies, for each of its subresources.
func TestEveryGenericKindHasStrategies(t *testing.T) {
	r := registry.Default()
	for _, k := range objects.Kinds() {
		if k.Generic && !r.Handles(k) && !strings.HasSuffix(k.APIGroup, ".test.io") {
			t.Errorf("%s has no strategies", k.Qualified())
		}
	}
}

// csrPEM is a base64 PEM certificate request for CN=alice.
const csrPEM = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlISk1ISUNBUUF3RURFT01Bd0dBMVVFQXd3RllXeHBZMlV3V1RBVEJnY3Foa2pPUFFJQkJnZ3Foa2pPUFFNQgpCd05DQUFSR0I0aDBMOGp4b3d0TThkL25kbWQ3RHp5YU5NdTFQZWhQOUVzcm52SzVhelNuUTI5bFdjeWJySVJFCjFYUWJvTjNLMGdZTlNOU0hPR3FvU0hrNnZzMEdvQUF3Q2dZSUtvWkl6ajBFQXdJRFJ3QXdSQUlnSW9SS2QvRmQKeWFFK2NWdzBlWkJtVUNhUGhkdTdJN3N0ZnVTU2lBVTdYV1FDSUVzaW5ZbEpNSTVpNDdydzAvOHdZL3Y2TXhGaAo1NllDaERXb1JMSmtZRGtZCi0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo="

// TestTable prints a Deployment as kube-apiserver does for kubectl get.
func TestTable(t *testing.T) {
	r := registry.Default()
	cols, ok := r.TableColumns(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	if !ok || strings.Join(names, ",") != "Name,Ready,Up-to-date,Available,Age,Containers,Images,Selector" {
		t.Fatalf("columns %v %v", names, ok)
	}
	cells, err := r.TableCells(kube[*appsv1.Deployment](t, created(t, deployment)))
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != len(cols) || cells[0] != "web" || cells[1] != "0/1" || cells[5] != "web" || cells[6] != "nginx" || cells[7] != "app=web" {
		t.Fatalf("cells %v", cells)
	}
	if cols, ok := r.TableColumns(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}); ok {
		t.Fatalf("CRD columns %v: kube-apiserver prints name and age", cols)
	}
}

// TestImmutableMessagesAreUpstream: services/validate's refusals of
// changes kube-apiserver forbids (immutable ConfigMaps and Secrets, a
// binding's roleRef) say exactly what kube-apiserver's own validation
// says.
func TestImmutableMessagesAreUpstream(t *testing.T) {
	yes := true
	om := metav1.ObjectMeta{Name: "c", Namespace: "ns", ResourceVersion: "1"}
	oldCM := &core.ConfigMap{ObjectMeta: om, Immutable: &yes, Data: map[string]string{"k": "1"}}
	newCM := oldCM.DeepCopy()
	newCM.Data["k"], newCM.Immutable = "2", nil
	oldSec := &core.Secret{ObjectMeta: om, Immutable: &yes, Type: core.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("1")}}
	newSec := oldSec.DeepCopy()
	newSec.Data["k"], newSec.Type = []byte("2"), core.SecretTypeTLS
	newSec.Data["tls.crt"], newSec.Data["tls.key"] = []byte("x"), []byte("y")
	ref := func(name string) rbacapi.RoleRef {
		return rbacapi.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}
	}
	subjects := []rbacapi.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}
	oldRB := &rbacapi.RoleBinding{ObjectMeta: om, RoleRef: ref("a"), Subjects: subjects}
	newRB := oldRB.DeepCopy()
	newRB.RoleRef = ref("b")

	pm := &corev1.ObjectMeta{Name: "c", Namespace: "ns"}
	pfRef := func(name string) *corev1.RoleRef {
		return &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}
	}
	for _, tc := range []struct {
		upstream error
		ours     *corev1.Status
	}{
		{apierrors.NewInvalid(core.Kind("ConfigMap"), "c", corevalidation.ValidateConfigMapUpdate(newCM, oldCM)),
			validate.ObjectUpdate(&corev1.ConfigMap{Metadata: pm, Data: map[string]string{"k": "2"}},
				&corev1.ConfigMap{Metadata: pm, Immutable: &yes, Data: map[string]string{"k": "1"}})},
		{apierrors.NewInvalid(core.Kind("Secret"), "c", corevalidation.ValidateSecretUpdate(newSec, oldSec)),
			validate.ObjectUpdate(&corev1.Secret{Metadata: pm, Immutable: &yes, Type: "kubernetes.io/tls", Data: map[string][]byte{"k": []byte("2"), "tls.crt": []byte("x"), "tls.key": []byte("y")}},
				&corev1.Secret{Metadata: pm, Immutable: &yes, Type: "Opaque", Data: map[string][]byte{"k": []byte("1")}})},
		{apierrors.NewInvalid(rbacapi.Kind("RoleBinding"), "c", rbacvalidation.ValidateRoleBindingUpdate(newRB, oldRB)),
			validate.ObjectUpdate(&corev1.RoleBinding{Metadata: pm, RoleRef: pfRef("b")}, &corev1.RoleBinding{Metadata: pm, RoleRef: pfRef("a")})},
	} {
		if tc.ours.GetMessage() != tc.upstream.Error() {
			t.Errorf("ours:     %s\nupstream: %s", tc.ours.GetMessage(), tc.upstream.Error())
		}
	}
}

// TestNewDefinitionWaitsForEstablished: a new CustomResourceDefinition's
// status.conditions is an empty list, so `kubectl wait --for
// condition=established` right after `kubectl apply` waits for the crds
// stage instead of failing on a null ("<nil> is of the type <nil>").
func TestNewDefinitionWaitsForEstablished(t *testing.T) {
	r := registry.Default()
	y, err := os.ReadFile("../crd/testdata/crontabs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := decode(t, string(y))
	if _, st := r.PrepareCreate(ctx, alice, "", u); st != nil {
		t.Fatalf("PrepareCreate: %v", st)
	}
	var got struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(u.GetContent(), &got); err != nil {
		t.Fatal(err)
	}
	if c := string(got.Status["conditions"]); c != "[]" {
		t.Fatalf("status.conditions of a new definition: %s, want []", c)
	}
	if v := string(got.Status["storedVersions"]); v != `["v1"]` {
		t.Fatalf("status.storedVersions: %s", v)
	}
}

// TestPrivilegedTemplateAllowed: a Job whose pod template sets
// securityContext.privileged is valid, as in a kube-apiserver with
// --allow-privileged=true; Pod Security admission decides whether its
// pods may run (services/workloadtest TestPrivilegedJobGatedByPodSecurity).
func TestPrivilegedTemplateAllowed(t *testing.T) {
	const job = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: priv, namespace: ns}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n" +
		"      containers: [{name: c, image: busybox, securityContext: {privileged: true}}]\n"
	if _, st := registry.Default().PrepareCreate(ctx, alice, "", decode(t, job)); st != nil {
		t.Fatalf("privileged template refused: %v", st)
	}
}
