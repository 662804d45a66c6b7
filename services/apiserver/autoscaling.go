package apiserver

// autoscaling: HorizontalPodAutoscalers are stored in autoscaling/v2 (a
// generic kind, services/registry: kube-apiserver's strategy and
// validation) and also served in autoscaling/v1, as kube-apiserver does:
// a v1 object is converted through the internal type with
// k8s.io/kubernetes's own conversions, which keep what v1 cannot say (the
// metrics besides CPU, behavior, conditions) in the
// autoscaling.alpha.kubernetes.io annotations, so a v1 client's update
// loses none of it.

import (
	"encoding/json"
	"errors"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	autoscalingapi "k8s.io/kubernetes/pkg/apis/autoscaling"

	"github.com/podflow/podflow/services/objects"
)

// hpaV1 is the autoscaling/v1 resource of the stored autoscaling/v2
// HorizontalPodAutoscalers.
func hpaV1() *resource {
	k := objects.HorizontalPodAutoscalers
	return &resource{group: k.APIGroup, version: "v1", name: k.Resource, kind: k.Name, namespaced: k.Namespaced,
		shortNames: k.ShortNames, categories: k.Categories, verbs: crudVerbs, store: k, view: hpaToV1, unview: hpaFromV1}
}

// hpaToV1 converts a stored (autoscaling/v2) HorizontalPodAutoscaler to
// autoscaling/v1.
func hpaToV1(o runtime.Object) (runtime.Object, error) {
	in, ok := o.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return nil, fmt.Errorf("hpaToV1: %T is not an autoscaling/v2 HorizontalPodAutoscaler", o)
	}
	out := &autoscalingv1.HorizontalPodAutoscaler{}
	if err := convertHPA(in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// hpaFromV1 converts an autoscaling/v1 HorizontalPodAutoscaler's body
// (JSON or YAML) to the stored version's JSON, after v1's defaults, as
// kube-apiserver decodes a v1 write.
func hpaFromV1(body []byte) ([]byte, error) {
	j, err := yaml.ToJSON(body)
	if err != nil {
		return nil, err
	}
	var in autoscalingv1.HorizontalPodAutoscaler
	if err := json.Unmarshal(j, &in); err != nil {
		return nil, err
	}
	if in.APIVersion != "" && in.APIVersion != "autoscaling/v1" || in.Kind != "" && in.Kind != "HorizontalPodAutoscaler" {
		return nil, fmt.Errorf("the object is %s %s; autoscaling/v1 HorizontalPodAutoscaler expected", in.APIVersion, in.Kind)
	}
	legacyscheme.Scheme.Default(&in)
	out := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := convertHPA(&in, out); err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// convertHPA converts a HorizontalPodAutoscaler between autoscaling/v1 and
// autoscaling/v2 (in and out: one of each) through the internal type,
// with kube's conversions; out gets its apiVersion and kind.
func convertHPA(in, out runtime.Object) error {
	internal := &autoscalingapi.HorizontalPodAutoscaler{}
	if err := legacyscheme.Scheme.Convert(in, internal, nil); err != nil {
		return err
	}
	if err := legacyscheme.Scheme.Convert(internal, out, nil); err != nil {
		return err
	}
	switch out.(type) {
	case *autoscalingv1.HorizontalPodAutoscaler:
		out.GetObjectKind().SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"))
	case *autoscalingv2.HorizontalPodAutoscaler:
		out.GetObjectKind().SetGroupVersionKind(autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"))
	}
	return nil
}

// addHPAConversions lets sc convert HorizontalPodAutoscalers between
// autoscaling/v1 and v2 (a FieldManager of one version reads the
// managedFields and objects of the other).
func addHPAConversions(sc *runtime.Scheme) error {
	convert := func(a, b any, _ conversion.Scope) error { return convertHPA(a.(runtime.Object), b.(runtime.Object)) }
	return errors.Join(
		sc.AddConversionFunc((*autoscalingv1.HorizontalPodAutoscaler)(nil), (*autoscalingv2.HorizontalPodAutoscaler)(nil), convert),
		sc.AddConversionFunc((*autoscalingv2.HorizontalPodAutoscaler)(nil), (*autoscalingv1.HorizontalPodAutoscaler)(nil), convert))
}
