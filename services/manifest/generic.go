package manifest

// Generic kinds (services/objects' kinds registered as data) are stored as
// *corev1.Unstructured: metadata as every kind's proto ObjectMeta, the rest
// of the object as its Kubernetes JSON. Their Go type, when there is one,
// is Scheme's (the k8s.io/api type of every built-in kind); a kind with
// none (a custom resource) is *unstructured.Unstructured.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	sigsjson "sigs.k8s.io/json"

	pf "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// Scheme knows the Go types of the built-in kinds: client-go's (every
// k8s.io/api type), apiextensions.k8s.io/v1's and apiregistration.k8s.io/v1's.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := errors.Join(kscheme.AddToScheme(s), apiextensionsv1.AddToScheme(s), apiregistrationv1.AddToScheme(s)); err != nil {
		panic(err)
	}
	return s
}()

// genericKind returns the registered generic kind of apiVersion/kind.
func genericKind(apiVersion, kind string) (objects.Kind, bool) {
	k, err := objects.KindOf(&pf.Unstructured{ApiVersion: apiVersion, Kind: kind})
	return k, err == nil
}

// NewKube returns a new object of apiVersion/kind's Go type with its
// TypeMeta set: the k8s.io/api type of a built-in kind, else (a kind with
// no Go type) an *unstructured.Unstructured.
func NewKube(apiVersion, kind string) runtime.Object {
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	obj, err := Scheme.New(gvk)
	if err != nil {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetGroupVersionKind(gvk)
		return u
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj
}

// HasGoType reports whether apiVersion/kind has a k8s.io/api Go type.
func HasGoType(apiVersion, kind string) bool {
	return Scheme.Recognizes(schema.FromAPIVersionAndKind(apiVersion, kind))
}

// genericFromJSON decodes the manifest JSON j of a generic kind strictly
// (unknown and duplicate fields are errors naming their path, for a kind
// with a Go type) into its Unstructured.
func genericFromJSON(j []byte, apiVersion, kind string, e *Error) (*pf.Unstructured, []string, error) {
	obj := NewKube(apiVersion, kind)
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if err := u.UnmarshalJSON(j); err != nil {
			e.Err, e.Detail = ErrMalformed, err.Error()
			return nil, nil, e
		}
	} else {
		strict, err := sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
		if err != nil {
			e.Err, e.Detail = ErrMalformed, err.Error()
			return nil, nil, e
		}
		if err := fieldErrors(e, ErrUnknownField, strict); err != nil {
			return nil, nil, err
		}
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, kind))
	u, err := genericFromKube(obj, apiVersion, kind)
	if err != nil {
		e.Err, e.Detail = ErrMalformed, err.Error()
		return nil, nil, e
	}
	return u, nil, nil
}

// genericFromKube converts a Kubernetes object of a generic kind to its
// Unstructured: its metadata to the proto, everything else but apiVersion
// and kind to content (the JSON the Go type writes, so quantities and
// times are canonical).
func genericFromKube(obj runtime.Object, apiVersion, kind string) (*pf.Unstructured, error) {
	var tree map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		tree = make(map[string]any, len(u.Object))
		for k, v := range u.Object {
			tree[k] = v
		}
	} else {
		j, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(j, &tree); err != nil {
			return nil, err
		}
	}
	out := &pf.Unstructured{ApiVersion: apiVersion, Kind: kind}
	var om metav1.ObjectMeta
	if m, ok := tree["metadata"]; ok && m != nil {
		mj, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(mj, &om); err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
	}
	md, err := MetaFromKube(&om)
	if err != nil {
		return nil, err
	}
	out.Metadata = md
	delete(tree, "apiVersion")
	delete(tree, "kind")
	delete(tree, "metadata")
	if len(tree) > 0 {
		if out.Content, err = json.Marshal(tree); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// genericToKube converts an Unstructured to its Kubernetes object (Go
// type or *unstructured.Unstructured), TypeMeta set.
func genericToKube(u *pf.Unstructured) (runtime.Object, error) {
	obj := NewKube(u.GetApiVersion(), u.GetKind())
	om := MetaToKube(u.GetMetadata())
	if un, ok := obj.(*unstructured.Unstructured); ok {
		content := map[string]any{}
		if len(u.GetContent()) > 0 {
			if err := utiljson.Unmarshal(u.GetContent(), &content); err != nil { // int64 numbers, as apimachinery's
				return nil, fmt.Errorf("%w: %s content: %w", ErrMalformed, u.GetKind(), err)
			}
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&om)
		if err != nil {
			return nil, err
		}
		un.Object = content
		un.Object["metadata"] = m
		un.SetAPIVersion(u.GetApiVersion())
		un.SetKind(u.GetKind())
		return un, nil
	}
	if len(u.GetContent()) > 0 && !bytes.Equal(u.GetContent(), []byte("{}")) {
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(u.GetContent(), obj); err != nil {
			return nil, fmt.Errorf("%w: %s content: %w", ErrMalformed, u.GetKind(), err)
		}
	}
	acc, ok := obj.(metav1.ObjectMetaAccessor)
	if !ok {
		return nil, fmt.Errorf("%w: %T has no metadata", ErrUnsupportedKind, obj)
	}
	p, ok := acc.GetObjectMeta().(*metav1.ObjectMeta)
	if !ok {
		return nil, fmt.Errorf("%w: %T has no ObjectMeta", ErrUnsupportedKind, obj)
	}
	*p = om
	obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(u.GetApiVersion(), u.GetKind()))
	return obj, nil
}

// kubeGVK is the group version kind of a Kubernetes object: its TypeMeta,
// else the one its Go type has in client-go's scheme.
func kubeGVK(o runtime.Object) (schema.GroupVersionKind, bool) {
	if gvk := o.GetObjectKind().GroupVersionKind(); gvk.Kind != "" && gvk.Version != "" {
		return gvk, true
	}
	if _, ok := o.(*unstructured.Unstructured); ok {
		return schema.GroupVersionKind{}, false
	}
	gvks, _, err := Scheme.ObjectKinds(o)
	if err != nil || len(gvks) == 0 {
		return schema.GroupVersionKind{}, false
	}
	return gvks[0], true
}

// MetaToKube converts podflow's ObjectMeta to Kubernetes'.
func MetaToKube(md *pf.ObjectMeta) metav1.ObjectMeta {
	if md == nil {
		return metav1.ObjectMeta{}
	}
	out := metav1.ObjectMeta{
		Name: md.GetName(), Namespace: md.GetNamespace(), GenerateName: md.GetGenerateName(), UID: types.UID(md.GetUid()),
		ResourceVersion: md.GetResourceVersion(), Generation: md.GetGeneration(),
		Labels: cloneMap(md.GetLabels()), Annotations: cloneMap(md.GetAnnotations()),
		Finalizers: append([]string(nil), md.GetFinalizers()...),
	}
	if md.DeletionGracePeriodSeconds != nil {
		v := *md.DeletionGracePeriodSeconds
		out.DeletionGracePeriodSeconds = &v
	}
	if ts := md.GetCreationTimestamp(); ts != nil {
		out.CreationTimestamp = metav1.NewTime(ts.AsTime())
	}
	if ts := md.GetDeletionTimestamp(); ts != nil {
		t := metav1.NewTime(ts.AsTime())
		out.DeletionTimestamp = &t
	}
	for _, r := range md.GetOwnerReferences() {
		ref := metav1.OwnerReference{APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Name: r.GetName(), UID: types.UID(r.GetUid())}
		if r.GetController() {
			ref.Controller = new(bool)
			*ref.Controller = true
		}
		if r.GetBlockOwnerDeletion() {
			ref.BlockOwnerDeletion = new(bool)
			*ref.BlockOwnerDeletion = true
		}
		out.OwnerReferences = append(out.OwnerReferences, ref)
	}
	for _, e := range md.GetManagedFields() {
		m := metav1.ManagedFieldsEntry{Manager: e.GetManager(), Operation: metav1.ManagedFieldsOperationType(e.GetOperation()),
			APIVersion: e.GetApiVersion(), FieldsType: e.GetFieldsType(), Subresource: e.GetSubresource()}
		if ts := e.GetTime(); ts != nil {
			t := metav1.NewTime(ts.AsTime())
			m.Time = &t
		}
		if f := e.GetFieldsV1(); f != nil {
			b, err := protojson.Marshal(f)
			if err == nil {
				m.FieldsV1 = &metav1.FieldsV1{Raw: b}
			}
		}
		out.ManagedFields = append(out.ManagedFields, m)
	}
	if len(out.Finalizers) == 0 {
		out.Finalizers = nil
	}
	return out
}

// MetaFromKube converts Kubernetes' ObjectMeta to podflow's. Fields
// podflow does not keep (selfLink) are dropped.
func MetaFromKube(om *metav1.ObjectMeta) (*pf.ObjectMeta, error) {
	out := &pf.ObjectMeta{
		Name: om.Name, Namespace: om.Namespace, GenerateName: om.GenerateName, Uid: string(om.UID),
		ResourceVersion: om.ResourceVersion, Generation: om.Generation,
		Labels: cloneMap(om.Labels), Annotations: cloneMap(om.Annotations),
		Finalizers: append([]string(nil), om.Finalizers...),
	}
	if om.DeletionGracePeriodSeconds != nil {
		v := *om.DeletionGracePeriodSeconds
		out.DeletionGracePeriodSeconds = &v
	}
	if !om.CreationTimestamp.IsZero() {
		out.CreationTimestamp = timestamppb.New(om.CreationTimestamp.Time)
	}
	if om.DeletionTimestamp != nil {
		out.DeletionTimestamp = timestamppb.New(om.DeletionTimestamp.Time)
	}
	for _, r := range om.OwnerReferences {
		out.OwnerReferences = append(out.OwnerReferences, &pf.OwnerReference{ApiVersion: r.APIVersion, Kind: r.Kind, Name: r.Name,
			Uid: string(r.UID), Controller: r.Controller != nil && *r.Controller, BlockOwnerDeletion: r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion})
	}
	for _, e := range om.ManagedFields {
		p := &pf.ManagedFieldsEntry{Manager: e.Manager, Operation: string(e.Operation), ApiVersion: e.APIVersion,
			FieldsType: e.FieldsType, Subresource: e.Subresource}
		if e.Time != nil {
			p.Time = timestamppb.New(e.Time.Time)
		}
		if e.FieldsV1 != nil && len(e.FieldsV1.Raw) > 0 {
			p.FieldsV1 = &structpb.Struct{}
			if err := protojson.Unmarshal(e.FieldsV1.Raw, p.FieldsV1); err != nil {
				return nil, fmt.Errorf("metadata.managedFields: %w", err)
			}
		}
		out.ManagedFields = append(out.ManagedFields, p)
	}
	if len(out.Finalizers) == 0 {
		out.Finalizers = nil
	}
	return out, nil
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// genericKinds lists the apiVersion/kind of every registered generic kind,
// sorted.
func genericKinds() []string {
	var out []string
	for _, k := range objects.Kinds() {
		if k.Generic {
			out = append(out, k.APIVersion()+"/"+k.Name)
		}
	}
	sort.Strings(out)
	return out
}
