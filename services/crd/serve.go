package crd

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// TableColumns are the columns of the version's table (kubectl get):
// Name, then its additionalPrinterColumns (Age when it has none), each
// with its type, format, description and priority.
func (v *Version) TableColumns() []metav1.TableColumnDefinition {
	t, err := v.table.ConvertToTable(context.Background(), &unstructured.UnstructuredList{Object: map[string]any{}}, nil)
	if err != nil {
		return nil
	}
	return t.ColumnDefinitions
}

// TableCells are u's cells in TableColumns' order, as kube-apiserver's
// custom resource table convertor prints them (a JSONPath that finds
// nothing leaves its cell empty).
func (v *Version) TableCells(u *unstructured.Unstructured) ([]any, error) {
	t, err := v.table.ConvertToTable(context.Background(), u, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		return nil, err
	}
	if len(t.Rows) != 1 {
		return nil, fmt.Errorf("crd: print %s: %d rows", v.def.names.Kind, len(t.Rows))
	}
	return t.Rows[0].Cells, nil
}

// FieldManager is the server-side apply field manager of the version's
// writes through subresource ("", "status", "scale"), as kube-apiserver's
// crdHandler builds it: typed by the definition's structural schemas,
// resetting what the strategy resets (status on the main resource, all
// but status through status).
func (v *Version) FieldManager(subresource string) (*managedfields.FieldManager, error) {
	if fm, ok := v.fieldManagers.Load(subresource); ok {
		return fm.(*managedfields.FieldManager), nil
	}
	var reset map[fieldpath.APIVersion]*fieldpath.Set
	switch subresource {
	case "":
		reset = v.strategy.(interface {
			GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set
		}).GetResetFields()
	case "status":
		reset = map[fieldpath.APIVersion]*fieldpath.Set{}
		for _, o := range v.def.versions {
			if o.status == nil {
				continue
			}
			for k, s := range o.status.(interface {
				GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set
			}).GetResetFields() {
				reset[k] = s
			}
		}
	}
	gvk := v.GVK()
	fm, err := managedfields.NewDefaultCRDFieldManager(v.def.typeConverter, v.def.converter, defaulter{v.def}, creater{}, gvk,
		gvk.GroupVersion(), subresource, fieldpath.NewExcludeFilterSetMap(reset))
	if err != nil {
		return nil, err
	}
	actual, _ := v.fieldManagers.LoadOrStore(subresource, fm)
	return actual.(*managedfields.FieldManager), nil
}

// defaulter applies a definition's defaults (kube-apiserver's
// unstructuredDefaulter).
type defaulter struct{ d *Definition }

func (f defaulter) Default(obj runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		f.d.defaults(u)
	}
}

// creater makes empty custom resources (kube-apiserver's
// unstructuredCreator).
type creater struct{}

func (creater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(kind)
	return u, nil
}
