package crd

import (
	"context"
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Sentinel errors of the package.
var (
	// ErrNotServed: the definition serves no such version.
	ErrNotServed = errors.New("crd: version not served")
	// ErrConversion: the conversion of an object between versions failed
	// (a conversion webhook that failed or answered wrong).
	ErrConversion = errors.New("crd: conversion failed")
)

// coerce is what kube-apiserver's unstructuredSchemaCoercer does to a
// custom resource decoded from a request or from the store (before it
// defaults it): ObjectMeta read and written back (malformed fields
// dropped when dropInvalid), unknown fields pruned by the structural
// schema of the object's version (unless the definition preserves
// unknown fields), non-nullable nulls without default removed, the
// metadata of embedded resources coerced. It returns the paths of the
// unknown fields it dropped (".spec.foo", "metadata.unknownMeta"), for
// field validation.
func (d *Definition) coerce(u *unstructured.Unstructured, dropInvalid, trackUnknown bool) ([]string, error) {
	kind, foundKind, err := unstructured.NestedString(u.Object, "kind")
	if err != nil {
		return nil, err
	}
	apiVersion, foundAPIVersion, err := unstructured.NestedString(u.Object, "apiVersion")
	if err != nil {
		return nil, err
	}
	om, foundMeta, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(u.Object, schemaobjectmeta.ObjectMetaOptions{
		DropMalformedFields: dropInvalid, ReturnUnknownFieldPaths: trackUnknown,
	})
	if err != nil {
		return nil, err
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	if gv.Group == d.Group() && kind == d.names.Kind {
		s := d.structural(gv.Version)
		if !d.CRD.Spec.PreserveUnknownFields {
			unknown = append(unknown, structuralpruning.PruneWithOptions(u.Object, s, true,
				structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: trackUnknown})...)
			structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, s)
		}
		ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, u.Object, s, false, schemaobjectmeta.CoerceOptions{
			DropInvalidFields: dropInvalid, ReturnUnknownFieldPaths: trackUnknown,
		})
		if ferr != nil {
			return nil, ferr
		}
		unknown = append(unknown, paths...)
	}
	if foundKind {
		u.SetKind(kind)
	}
	if foundAPIVersion {
		u.SetAPIVersion(apiVersion)
	}
	if foundMeta {
		if err := schemaobjectmeta.SetObjectMeta(u.Object, om); err != nil {
			return nil, err
		}
	}
	return unknown, nil
}

// structural is the structural schema of a version (nil: none).
func (d *Definition) structural(version string) *structuralschema.Structural {
	if v, ok := d.versions[version]; ok {
		return v.structural
	}
	return nil
}

// defaults applies the defaults of the object's version's schema.
func (d *Definition) defaults(u *unstructured.Unstructured) {
	gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
	if err != nil || gv.Group != d.Group() {
		return
	}
	if s := d.structural(gv.Version); s != nil {
		structuraldefaulting.Default(u.Object, s)
	}
}

// Convert converts u (any version of the definition) to version: a copy
// with apiVersion rewritten (conversion None), or the conversion
// webhook's answer. u is not changed.
func (d *Definition) Convert(u *unstructured.Unstructured, version string) (*unstructured.Unstructured, error) {
	if u.GetAPIVersion() == d.Group()+"/"+version {
		return u.DeepCopy(), nil
	}
	out, err := d.converter.ConvertToVersion(u, schema.GroupVersion{Group: d.Group(), Version: version})
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q to %s: %w", ErrConversion, d.names.Kind, u.GetName(), version, err)
	}
	cu, ok := out.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%w: %s %q converted to %T", ErrConversion, d.names.Kind, u.GetName(), out)
	}
	return cu, nil
}

// ConvertList converts every item of l (of any versions) to version in
// one conversion (one webhook request for the items not in version yet).
func (d *Definition) ConvertList(items []*unstructured.Unstructured, version string) ([]*unstructured.Unstructured, error) {
	gv := schema.GroupVersion{Group: d.Group(), Version: version}
	l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": gv.String(), "kind": d.names.ListKind}}
	convert := false
	for _, it := range items {
		l.Items = append(l.Items, *it)
		if it.GetAPIVersion() != gv.String() {
			convert = true
		}
	}
	if !convert {
		out := make([]*unstructured.Unstructured, len(items))
		for i := range items {
			out[i] = items[i].DeepCopy()
		}
		return out, nil
	}
	res, err := d.converter.ConvertToVersion(l, gv)
	if err != nil {
		return nil, fmt.Errorf("%w: %s list to %s: %w", ErrConversion, d.names.Kind, version, err)
	}
	cl, ok := res.(*unstructured.UnstructuredList)
	if !ok || len(cl.Items) != len(items) {
		return nil, fmt.Errorf("%w: %s list to %s: %T", ErrConversion, d.names.Kind, version, res)
	}
	out := make([]*unstructured.Unstructured, len(cl.Items))
	for i := range cl.Items {
		out[i] = &cl.Items[i]
	}
	return out, nil
}

// FromStorage is a stored object as this version serves it: converted,
// coerced and pruned by this version's schema (invalid metadata dropped,
// as kube-apiserver reads old objects) and defaulted — so a default
// added to the schema shows in objects stored before it.
func (v *Version) FromStorage(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	out, err := v.def.Convert(u, v.Name)
	if err != nil {
		return nil, err
	}
	return out, v.def.normalize(out)
}

// normalize coerces and defaults an object read from the store (or a
// converter).
func (d *Definition) normalize(u *unstructured.Unstructured) error {
	if _, err := d.coerce(u, true, false); err != nil {
		return err
	}
	d.defaults(u)
	if u.GetGeneration() == 0 { // repairGeneration, as kube-apiserver's storage decoder
		u.SetGeneration(1)
	}
	return nil
}

// FromStorageList is FromStorage of many objects, converted in one
// conversion.
func (v *Version) FromStorageList(items []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	out, err := v.def.ConvertList(items, v.Name)
	if err != nil {
		return nil, err
	}
	for _, u := range out {
		if err := v.def.normalize(u); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ToStorage converts u (any served version) to the storage version, as
// kube-apiserver's storage encoder does before it writes.
func (d *Definition) ToStorage(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	out, err := d.Convert(u, d.Storage)
	if err != nil {
		return nil, err
	}
	if _, err := d.coerce(out, false, false); err != nil {
		return nil, err
	}
	return out, nil
}

// Attrs are the object's labels and selectable fields (metadata.name,
// metadata.namespace for a namespaced kind, and the version's
// selectableFields, formatted as kube-apiserver formats them), from the
// version's strategy.
func (v *Version) Attrs(obj runtime.Object) (map[string]string, map[string]string, error) {
	l, f, err := v.attrs(obj)
	return l, f, err
}

// requestInfo is the request kube-apiserver's handlers put in a
// strategy's context.
func (v *Version) requestInfo(ctx context.Context, verb, subresource, namespace, name string) context.Context {
	info := &request.RequestInfo{IsResourceRequest: true, Verb: verb, APIPrefix: "apis", APIGroup: v.def.Group(), APIVersion: v.Name,
		Resource: v.def.names.Plural, Namespace: namespace, Name: name, Subresource: subresource,
		Parts: []string{v.def.names.Plural}}
	if name != "" {
		info.Parts = append(info.Parts, name)
	}
	if subresource != "" {
		info.Parts = append(info.Parts, subresource)
	}
	ctx = request.WithRequestInfo(ctx, info)
	return request.WithNamespace(ctx, namespace)
}

// isCRD reports whether u is a CustomResourceDefinition.
func isCRD(u *unstructured.Unstructured) bool {
	return u.GetAPIVersion() == apiextensionsv1.SchemeGroupVersion.String() && u.GetKind() == "CustomResourceDefinition"
}
