package crd

import (
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// openAPISpecs are a definition's OpenAPI documents, built once.
type openAPISpecs struct {
	v2  *spec.Swagger             // every served version, merged
	v3  map[string]*spec3.OpenAPI // by served version
	err error
}

// specs builds the definition's documents as kube-apiserver's OpenAPI
// controllers do (apiextensions-apiserver's builder, selectable fields
// included; v2 defaults pruned to merge with the built-in document).
func (d *Definition) specs() *openAPISpecs {
	d.openAPIOnce.Do(func() {
		s := &d.openAPI
		s.v2, s.v3 = &spec.Swagger{}, map[string]*spec3.OpenAPI{}
		for _, v := range d.CRD.Spec.Versions {
			if !v.Served {
				continue
			}
			v2, err := builder.BuildOpenAPIV2(d.CRD, v.Name, builder.Options{V2: true, IncludeSelectableFields: true})
			if err != nil {
				s.err = err
				return
			}
			v2.Definitions = handler.PruneDefaults(v2.Definitions)
			if s.v2, err = builder.MergeSpecs(s.v2, v2); err != nil {
				s.err = err
				return
			}
			v3, err := builder.BuildOpenAPIV3(d.CRD, v.Name, builder.Options{V2: false, IncludeSelectableFields: true})
			if err != nil {
				s.err = err
				return
			}
			s.v3[v.Name] = v3
		}
	})
	return &d.openAPI
}

// OpenAPIV2 is the definition's part of /openapi/v2: the paths and
// definitions of every served version.
func (d *Definition) OpenAPIV2() (*spec.Swagger, error) {
	s := d.specs()
	return s.v2, s.err
}

// OpenAPIV3 is the definition's part of the /openapi/v3 document of one
// served version (nil when it does not serve it).
func (d *Definition) OpenAPIV3(version string) (*spec3.OpenAPI, error) {
	s := d.specs()
	return s.v3[version], s.err
}
