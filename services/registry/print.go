package registry

import (
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
)

// tableGenerator is kube-apiserver's: the column definitions and row
// printers of the built-in kinds, over their internal types.
var tableGenerator = sync.OnceValue(func() *printers.HumanReadableGenerator {
	return printers.NewTableGenerator().With(printersinternal.AddHandlers)
})

// columnCache holds TableColumns' answers by group version kind.
var columnCache sync.Map // schema.GroupVersionKind -> []metav1.TableColumnDefinition (nil: none)

// TableColumns returns the columns kube-apiserver's table of gvk has (a
// built-in kind's printer, wide: every column, each with its priority);
// ok is false for a kind it has no printer for (it then prints name and
// age).
func (r *Registry) TableColumns(gvk schema.GroupVersionKind) (cols []metav1.TableColumnDefinition, ok bool) {
	if c, found := columnCache.Load(gvk); found {
		cols = c.([]metav1.TableColumnDefinition)
		return cols, cols != nil
	}
	defer func() {
		if recover() != nil { // a printer that cannot print an empty object
			cols, ok = nil, false
		}
		columnCache.Store(gvk, cols)
	}()
	in, err := legacyscheme.Scheme.New(gvk.GroupKind().WithVersion(runtime.APIVersionInternal))
	if err != nil {
		return nil, false
	}
	t, err := tableGenerator().GenerateTable(in, printers.GenerateOptions{Wide: true})
	if err != nil {
		return nil, false
	}
	return t.ColumnDefinitions, true
}

// TableCells returns the cells of obj's row (obj: a built-in kind's
// k8s.io/api object, as stored) in TableColumns' order.
func (r *Registry) TableCells(obj runtime.Object) (cells []any, err error) {
	defer func() {
		if p := recover(); p != nil {
			cells, err = nil, fmt.Errorf("registry: print %T: %v", obj, p)
		}
	}()
	gvk := obj.GetObjectKind().GroupVersionKind()
	in, err := legacyscheme.Scheme.New(gvk.GroupKind().WithVersion(runtime.APIVersionInternal))
	if err != nil {
		return nil, err
	}
	if err := legacyscheme.Scheme.Convert(obj, in, nil); err != nil {
		return nil, err
	}
	t, err := tableGenerator().GenerateTable(in, printers.GenerateOptions{Wide: true, NoHeaders: true})
	if err != nil {
		return nil, err
	}
	if len(t.Rows) != 1 {
		return nil, fmt.Errorf("registry: print %s: %d rows", gvk.Kind, len(t.Rows))
	}
	return t.Rows[0].Cells, nil
}
