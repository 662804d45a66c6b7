package crd

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apiextensions-apiserver/pkg/crdserverscheme"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-openapi/pkg/spec3"

	"github.com/podflow/podflow/services/objects"
)

// Definition is one CustomResourceDefinition as this process serves it:
// its kind in the store, and each version's schema, strategies, printer
// and converter, built from the definition by the apiextensions-apiserver
// packages kube-apiserver builds them with. A Definition is immutable:
// a changed CustomResourceDefinition is a new Definition.
type Definition struct {
	// CRD is the definition as stored (defaulted by its strategy).
	CRD *apiextensionsv1.CustomResourceDefinition
	// Kind is where its objects live: the accepted kind and plural, the
	// scope, /registry/<group>/<plural>/ and the storage version, as
	// registered (objects.Replace) by the Catalog that serves it.
	Kind    objects.Kind
	generic objects.GenericKind
	// Revision is the store revision of CRD.
	Revision int64
	// Storage is the storage version's name.
	Storage string

	versions map[string]*Version
	// served are the served versions, kube-aware order (the preferred
	// first).
	served []*Version

	converter     runtime.ObjectConvertor // safe: copies its input
	typeConverter managedfields.TypeConverter

	established, namesAccepted, terminating bool
	names                                   apiextensionsv1.CustomResourceDefinitionNames

	openAPIOnce sync.Once
	openAPI     openAPISpecs
}

// Version is one version of a Definition.
type Version struct {
	def *Definition
	// Name is the version's name ("v1beta1").
	Name    string
	Served  bool
	Storage bool
	// Warning is the deprecation warning of a deprecated version ("").
	Warning string

	structural *structuralschema.Structural
	// strategy is kube-apiserver's customresource strategy of this
	// version; status is its status strategy (nil without a status
	// subresource).
	strategy createUpdateStrategy
	status   rest.RESTUpdateStrategy
	attrs    attrsFunc

	statusSub *apiextensionsinternal.CustomResourceSubresourceStatus
	scaleSub  *apiextensionsinternal.CustomResourceSubresourceScale
	table     rest.TableConvertor
	selectors []string // selectableFields' paths, without the leading dot

	fieldManagers sync.Map // subresource -> *managedfields.FieldManager
}

// createUpdateStrategy is a strategy serving creates and updates.
type createUpdateStrategy interface {
	rest.RESTCreateStrategy
	rest.RESTUpdateStrategy
}

// attrsFunc is a strategy's GetAttrs: labels and the selectable fields
// (metadata.name, metadata.namespace and the version's selectableFields).
type attrsFunc func(runtime.Object) (labels.Set, fields.Set, error)

// Converters make a definition's converter: CRConverterFactory's
// NewConverter (conversion None, or a Webhook through an HTTPS client).
type Converters interface {
	NewConverter(crd *apiextensionsv1.CustomResourceDefinition) (safe, unsafe runtime.ObjectConvertor, err error)
}

// NewDefinition builds the serving form of crd, stored at revision rev.
// A definition whose names are not accepted yet has no Kind (zero) and
// is not served.
func NewDefinition(crd *apiextensionsv1.CustomResourceDefinition, rev int64, conv Converters) (*Definition, error) {
	d := &Definition{CRD: crd, Revision: rev, versions: map[string]*Version{},
		established:   apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established),
		namesAccepted: apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted),
		terminating:   crd.DeletionTimestamp != nil || apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Terminating),
		names:         crd.Status.AcceptedNames,
	}
	storage, err := apihelpers.GetCRDStorageVersion(crd)
	if err != nil {
		return nil, err
	}
	d.Storage = storage
	if !d.Servable() {
		return d, nil
	}
	if d.names.Plural == "" || d.names.Singular == "" || d.names.Kind == "" || d.names.ListKind == "" {
		return nil, fmt.Errorf("crd: %s has accepted names without plural, singular, kind or listKind", crd.Name)
	}
	structurals := map[string]*structuralschema.Structural{}
	for _, v := range crd.Spec.Versions {
		s, err := structuralOf(crd, v.Name)
		if err != nil {
			return nil, err
		}
		structurals[v.Name] = s
	}
	if d.converter, _, err = conv.NewConverter(crd); err != nil {
		return nil, fmt.Errorf("crd: the converter of %s: %w", crd.Name, err)
	}
	if d.typeConverter, err = typeConverterOf(crd); err != nil {
		return nil, fmt.Errorf("crd: the field schema of %s: %w", crd.Name, err)
	}
	typer := crdserverscheme.NewUnstructuredObjectTyper()
	namespaced := crd.Spec.Scope == apiextensionsv1.NamespaceScoped
	for _, v := range crd.Spec.Versions {
		if !v.Served && !v.Storage {
			continue
		}
		ver := &Version{def: d, Name: v.Name, Served: v.Served, Storage: v.Storage, structural: structurals[v.Name]}
		if v.Deprecated {
			if v.DeprecationWarning != nil {
				ver.Warning = *v.DeprecationWarning
			} else {
				ver.Warning = defaultDeprecationWarning(v.Name, crd.Spec)
			}
		}
		var props *apiextensionsinternal.JSONSchemaProps
		if v.Schema != nil {
			in := &apiextensionsinternal.CustomResourceValidation{}
			if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, in, nil); err != nil {
				return nil, fmt.Errorf("crd: the schema of %s %s: %w", crd.Name, v.Name, err)
			}
			props = in.OpenAPIV3Schema
		}
		validator, _, err := apiservervalidation.NewSchemaValidator(props)
		if err != nil {
			return nil, fmt.Errorf("crd: the schema of %s %s: %w", crd.Name, v.Name, err)
		}
		var statusValidator apiservervalidation.SchemaValidator
		if v.Subresources != nil && v.Subresources.Status != nil {
			ver.statusSub = &apiextensionsinternal.CustomResourceSubresourceStatus{}
			if props != nil && props.Properties != nil {
				if st, ok := props.Properties["status"]; ok {
					if statusValidator, _, err = apiservervalidation.NewSchemaValidator(&st); err != nil {
						return nil, fmt.Errorf("crd: the status schema of %s %s: %w", crd.Name, v.Name, err)
					}
				}
			}
		}
		if v.Subresources != nil && v.Subresources.Scale != nil {
			ver.scaleSub = &apiextensionsinternal.CustomResourceSubresourceScale{}
			if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(v.Subresources.Scale, ver.scaleSub, nil); err != nil {
				return nil, err
			}
		}
		kind := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: d.names.Kind}
		strategy := customresource.NewStrategy(typer, namespaced, kind, validator, statusValidator, ver.structural, ver.statusSub,
			ver.scaleSub, v.SelectableFields)
		ver.strategy, ver.attrs = strategy, strategy.GetAttrs
		if ver.statusSub != nil {
			ver.status = customresource.NewStatusStrategy(strategy)
		}
		if ver.table, err = tableconvertor.New(columnsOf(v)); err != nil {
			// kube-apiserver falls back to the default printer too.
			ver.table, _ = tableconvertor.New(nil)
		}
		for _, sf := range v.SelectableFields {
			ver.selectors = append(ver.selectors, strings.TrimPrefix(sf.JSONPath, "."))
		}
		d.versions[v.Name] = ver
		if v.Served {
			d.served = append(d.served, ver)
		}
	}
	sort.SliceStable(d.served, func(i, j int) bool {
		return version.CompareKubeAwareVersionStrings(d.served[i].Name, d.served[j].Name) > 0
	})
	var subs []string
	for _, v := range d.versions {
		if v.statusSub != nil && !slices.Contains(subs, "status") {
			subs = append(subs, "status")
		}
		if v.scaleSub != nil && !slices.Contains(subs, "scale") {
			subs = append(subs, "scale")
		}
	}
	sort.Strings(subs)
	d.generic = objects.GenericKind{Group: crd.Spec.Group, Version: storage, Kind: d.names.Kind,
		Resource: d.names.Plural, Namespaced: namespaced, Prefix: objects.CustomResourcePrefix(crd.Spec.Group, d.names.Plural),
		ShortNames: d.names.ShortNames, Categories: d.names.Categories, Subresources: subs}
	return d, nil
}

// structuralOf is the structural schema of crd's version, with defaults
// pruned, as kube-apiserver's crdHandler builds it (nil for a version
// without a schema).
func structuralOf(crd *apiextensionsv1.CustomResourceDefinition, version string) (*structuralschema.Structural, error) {
	val, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil || val == nil {
		return nil, err
	}
	in := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, in, nil); err != nil {
		return nil, fmt.Errorf("crd: the schema of %s %s: %w", crd.Name, version, err)
	}
	s, err := structuralschema.NewStructural(in.OpenAPIV3Schema)
	if crd.Spec.PreserveUnknownFields {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("crd: the schema of %s %s is not structural: %w", crd.Name, version, err)
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, fmt.Errorf("crd: the defaults of %s %s: %w", crd.Name, version, err)
	}
	return s, nil
}

// typeConverterOf types the definition's objects for server-side apply:
// structured-merge-diff's schema of every version, built from the same
// OpenAPI v3 models kube-apiserver serves (buildOpenAPIModelsForApply).
func typeConverterOf(crd *apiextensionsv1.CustomResourceDefinition) (managedfields.TypeConverter, error) {
	var specs []*spec3.OpenAPI
	for _, v := range crd.Spec.Versions {
		s, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, err
	}
	if merged.Components == nil || len(merged.Components.Schemas) == 0 {
		return managedfields.NewDeducedTypeConverter(), nil
	}
	return managedfields.NewTypeConverter(merged.Components.Schemas, crd.Spec.PreserveUnknownFields)
}

// columnsOf is a version's printer columns, Age when it names none
// (kube-apiserver's serveDefaultColumnsIfEmpty).
func columnsOf(v apiextensionsv1.CustomResourceDefinitionVersion) []apiextensionsv1.CustomResourceColumnDefinition {
	if len(v.AdditionalPrinterColumns) > 0 {
		return v.AdditionalPrinterColumns
	}
	return []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date",
		Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"], JSONPath: ".metadata.creationTimestamp"}}
}

// defaultDeprecationWarning is kube-apiserver's warning for a deprecated
// version without one of its own: it names the version that replaces it.
func defaultDeprecationWarning(deprecatedVersion string, crd apiextensionsv1.CustomResourceDefinitionSpec) string {
	msg := fmt.Sprintf("%s/%s %s is deprecated", crd.Group, deprecatedVersion, crd.Names.Kind)
	var servedNonDeprecated []string
	for _, v := range crd.Versions {
		if v.Served && !v.Deprecated && version.CompareKubeAwareVersionStrings(deprecatedVersion, v.Name) < 0 {
			servedNonDeprecated = append(servedNonDeprecated, v.Name)
		}
	}
	if len(servedNonDeprecated) == 0 {
		return msg
	}
	sort.Slice(servedNonDeprecated, func(i, j int) bool {
		return version.CompareKubeAwareVersionStrings(servedNonDeprecated[i], servedNonDeprecated[j]) > 0
	})
	return msg + fmt.Sprintf("; use %s/%s %s", crd.Group, servedNonDeprecated[0], crd.Names.Kind)
}

// Servable reports whether the definition's objects are served: its
// names are accepted or it is established (kube-apiserver's crdHandler).
func (d *Definition) Servable() bool { return d.namesAccepted || d.established }

// Established reports whether the definition is in discovery.
func (d *Definition) Established() bool { return d.established }

// Terminating reports whether the definition is being deleted: its
// objects may be read and deleted, not created.
func (d *Definition) Terminating() bool { return d.terminating }

// Group is the definition's API group.
func (d *Definition) Group() string { return d.CRD.Spec.Group }

// Names are the accepted names.
func (d *Definition) Names() apiextensionsv1.CustomResourceDefinitionNames { return d.names }

// Namespaced reports whether the objects live in namespaces.
func (d *Definition) Namespaced() bool { return d.CRD.Spec.Scope == apiextensionsv1.NamespaceScoped }

// Version returns the served or stored version name.
func (d *Definition) Version(name string) (*Version, bool) {
	v, ok := d.versions[name]
	return v, ok
}

// Served are the served versions, the preferred first.
func (d *Definition) Served() []*Version { return d.served }

// Definition is the version's definition.
func (v *Version) Definition() *Definition { return v.def }

// GroupVersion is the version's group/version ("stable.example.com/v1").
func (v *Version) GroupVersion() string { return v.def.Group() + "/" + v.Name }

// GVK is the version's group, version and kind.
func (v *Version) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: v.def.Group(), Version: v.Name, Kind: v.def.names.Kind}
}

// HasStatus and HasScale report the version's subresources.
func (v *Version) HasStatus() bool { return v.statusSub != nil }
func (v *Version) HasScale() bool  { return v.scaleSub != nil }

// SelectableFields are the version's selectableFields paths
// ("spec.color"), besides metadata.name and metadata.namespace.
func (v *Version) SelectableFields() []string { return v.selectors }
