package manifest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	pf "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

const deploymentYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {app: web}
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: "1234", controller: true}
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
        resources:
          requests: {cpu: 100m, memory: 1Gi}
`

// TestGenericDecode: a Deployment manifest becomes an Unstructured whose
// metadata is the proto's and whose content is the rest of the object in
// its Go type's JSON.
func TestGenericDecode(t *testing.T) {
	o := decodeOne(t, []byte(deploymentYAML))
	u, ok := o.Message.(*pf.Unstructured)
	if !ok {
		t.Fatalf("decoded %T, want *corev1.Unstructured", o.Message)
	}
	if o.APIVersion != "apps/v1" || o.Kind != "Deployment" || u.GetApiVersion() != "apps/v1" || u.GetKind() != "Deployment" {
		t.Fatalf("kind %s %s / %s %s", o.APIVersion, o.Kind, u.GetApiVersion(), u.GetKind())
	}
	md := u.GetMetadata()
	if md.GetName() != "web" || md.GetNamespace() != "shop" || md.GetLabels()["app"] != "web" ||
		len(md.GetOwnerReferences()) != 1 || !md.GetOwnerReferences()[0].GetController() || md.GetOwnerReferences()[0].GetUid() != "1234" {
		t.Fatalf("metadata %v", md)
	}
	var content map[string]any
	if err := json.Unmarshal(u.GetContent(), &content); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"apiVersion", "kind", "metadata"} {
		if _, ok := content[k]; ok {
			t.Errorf("content holds %q: %s", k, u.GetContent())
		}
	}
	if !strings.Contains(string(u.GetContent()), `"replicas":3`) || !strings.Contains(string(u.GetContent()), `"cpu":"100m"`) {
		t.Errorf("content %s", u.GetContent())
	}
	if k, err := objects.KindOf(u); err != nil || k.Key("shop", "web") != "/registry/deployments/shop/web" {
		t.Fatalf("KindOf: %v %v", k, err)
	}
}

// TestGenericDecodeErrors: unknown fields of a generic kind are refused
// with their path as for every other kind; a version podflow does not
// serve is an unsupported kind.
func TestGenericDecodeErrors(t *testing.T) {
	_, err := Decode([]byte(strings.Replace(deploymentYAML, "replicas: 3", "replicaz: 3", 1)))
	var e *Error
	if !errors.Is(err, ErrUnknownField) || !errors.As(err, &e) || e.Field != "spec.replicaz" {
		t.Fatalf("unknown field: %v", err)
	}
	_, err = Decode([]byte(strings.Replace(deploymentYAML, "apps/v1", "apps/v1beta1", 1)))
	if !errors.Is(err, ErrUnsupportedKind) {
		t.Fatalf("apps/v1beta1: %v, want ErrUnsupportedKind", err)
	}
	_, err = Decode([]byte("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {parallelism: many}\n"))
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("wrong type: %v, want ErrMalformed", err)
	}
}

// TestGenericKubeRoundTrip: ToKube gives the client-go type with every
// field, FromKube gives the Unstructured back (TypeMeta empty, as
// client-go returns objects).
func TestGenericKubeRoundTrip(t *testing.T) {
	u := decodeOne(t, []byte(deploymentYAML)).Message.(*pf.Unstructured)
	u.Metadata.Uid, u.Metadata.ResourceVersion, u.Metadata.Generation = "u-1", "42", 3
	u.Metadata.CreationTimestamp = timestamppbOf(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	k, err := ToKube(u)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := k.(*appsv1.Deployment)
	if !ok {
		t.Fatalf("ToKube: %T", k)
	}
	if d.APIVersion != "apps/v1" || d.Kind != "Deployment" || *d.Spec.Replicas != 3 || d.UID != "u-1" || d.ResourceVersion != "42" ||
		d.Generation != 3 || d.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String() != "100m" ||
		d.CreationTimestamp.Year() != 2025 || *d.OwnerReferences[0].Controller != true || d.OwnerReferences[0].BlockOwnerDeletion != nil {
		t.Fatalf("ToKube: %+v", d)
	}
	d.TypeMeta = metav1.TypeMeta{}
	back, err := FromKube(d)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(u, back, protocmp.Transform()); diff != "" {
		t.Fatalf("FromKube(ToKube(u)) differs (-want +got):\n%s", diff)
	}
	// A typed object built in Go, as a controller builds one.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: types.UID("x")},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}}}}
	m, err := FromKube(job)
	if err != nil {
		t.Fatal(err)
	}
	if ju := m.(*pf.Unstructured); ju.GetApiVersion() != "batch/v1" || ju.GetKind() != "Job" || ju.GetMetadata().GetUid() != "x" {
		t.Fatalf("FromKube(Job) = %v", ju)
	}
}

// TestGenericEncode writes the manifest kubectl would print.
func TestGenericEncode(t *testing.T) {
	u := decodeOne(t, []byte(deploymentYAML)).Message.(*pf.Unstructured)
	y, err := Encode(u, FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"apiVersion: apps/v1\n", "kind: Deployment\n", "  replicas: 3\n", "  name: web\n"} {
		if !strings.Contains(string(y), want) {
			t.Errorf("YAML lacks %q:\n%s", want, y)
		}
	}
	again := decodeOne(t, y).Message
	if !proto.Equal(u, again) {
		t.Fatalf("Decode(Encode(u)) differs:\n%v\n%v", u, again)
	}
}

// TestGenericWithoutGoType: a kind registered at run time (a custom
// resource's) has no Go type: it converts through
// *unstructured.Unstructured, and its fields are kept as written.
func TestGenericWithoutGoType(t *testing.T) {
	if _, err := objects.Replace(objects.GenericKind{Group: "manifest.test.io", Version: "v1", Kind: "Widget", Resource: "widgets",
		Namespaced: true, Prefix: "/registry/manifest.test.io/widgets/"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objects.Unregister("manifest.test.io", "Widget") })
	o := decodeOne(t, []byte("apiVersion: manifest.test.io/v1\nkind: Widget\nmetadata: {name: w, namespace: ns}\nspec: {size: 3, color: blue}\n"))
	u := o.Message.(*pf.Unstructured)
	if string(u.GetContent()) != `{"spec":{"color":"blue","size":3}}` {
		t.Fatalf("content %s", u.GetContent())
	}
	k, err := ToKube(u)
	if err != nil {
		t.Fatal(err)
	}
	un, ok := k.(*unstructured.Unstructured)
	if !ok || un.GetName() != "w" || un.GetKind() != "Widget" {
		t.Fatalf("ToKube: %T %v", k, k)
	}
	if size, _, _ := unstructured.NestedInt64(un.Object, "spec", "size"); size != 3 {
		t.Fatalf("spec.size %v", un.Object["spec"])
	}
	back, err := FromKube(un)
	if err != nil || !proto.Equal(back, u) {
		t.Fatalf("FromKube: %v %v", back, err)
	}
}

func timestamppbOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
