package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHorizontalPodAutoscalerVersions: HorizontalPodAutoscalers are served
// in autoscaling/v2 and autoscaling/v1 over one stored object, as
// kube-apiserver serves them — v1 converted with kube's conversions (what
// v1 cannot say kept in annotations, so a v1 update loses nothing), both
// versions validated by kube's strategy, /status, and both versions in
// legacy and aggregated discovery with v2 preferred.
func TestHorizontalPodAutoscalerVersions(t *testing.T) {
	s := startSystem(t, options{})
	cs := s.adminClientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	v1c, v2c := cs.AutoscalingV1().HorizontalPodAutoscalers("default"), cs.AutoscalingV2().HorizontalPodAutoscalers("default")

	// A v2 object with what v1 has no field for: a memory metric and a
	// scale-down behavior.
	window := int32(60)
	mem := resource.MustParse("100Mi")
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MaxReplicas:    5,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: k8scorev1.ResourceMemory, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &mem}}}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &window}},
		}}
	created, err := v2c.Create(ctx, hpa, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create v2: %v", err)
	}
	if created.Spec.MinReplicas == nil || *created.Spec.MinReplicas != 1 {
		t.Errorf("v2 minReplicas not defaulted to 1: %v", created.Spec.MinReplicas)
	}

	// Read through v1: the memory metric travels in kube's annotation.
	old, err := v1c.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get v1: %v", err)
	}
	if old.APIVersion != "" && old.APIVersion != "autoscaling/v1" || old.Spec.MaxReplicas != 5 || old.Spec.ScaleTargetRef.Name != "web" ||
		old.Spec.TargetCPUUtilizationPercentage != nil || !strings.Contains(old.Annotations["autoscaling.alpha.kubernetes.io/metrics"], "memory") {
		t.Fatalf("v1 view: %+v annotations %v", old.Spec, old.Annotations)
	}
	if old.UID != created.UID || old.ResourceVersion != created.ResourceVersion {
		t.Fatalf("v1 view uid %s rv %s, v2 %s %s", old.UID, old.ResourceVersion, created.UID, created.ResourceVersion)
	}

	// Update through v1: v2 still has the metric and the behavior.
	old.Spec.MaxReplicas = 7
	if _, err := v1c.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update v1: %v", err)
	}
	now, err := v2c.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Spec.MaxReplicas != 7 || len(now.Spec.Metrics) != 1 || now.Spec.Metrics[0].Resource == nil ||
		now.Spec.Metrics[0].Resource.Name != k8scorev1.ResourceMemory || now.Spec.Behavior == nil || now.Spec.Behavior.ScaleDown == nil ||
		now.Spec.Behavior.ScaleDown.StabilizationWindowSeconds == nil || *now.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 60 {
		t.Fatalf("after the v1 update, v2 spec %+v", now.Spec)
	}
	managedV1 := false
	for _, m := range now.ManagedFields {
		managedV1 = managedV1 || (m.APIVersion == "autoscaling/v1" && m.Operation == metav1.ManagedFieldsOperationUpdate)
	}
	if !managedV1 {
		t.Errorf("the v1 update is not in managedFields: %+v", now.ManagedFields)
	}
	if _, ok := now.Annotations["autoscaling.alpha.kubernetes.io/metrics"]; ok {
		t.Errorf("the conversion annotation was stored: %v", now.Annotations)
	}

	// Create through v1: targetCPUUtilizationPercentage is v2's CPU
	// utilization metric; minReplicas v1's default.
	cpu := int32(50)
	if _, err := v1c.Create(ctx, &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "cpu"},
		Spec: autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"},
			MaxReplicas: 3, TargetCPUUtilizationPercentage: &cpu}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create v1: %v", err)
	}
	byV2, err := v2c.Get(ctx, "cpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(byV2.Spec.Metrics) != 1 || byV2.Spec.Metrics[0].Resource == nil || byV2.Spec.Metrics[0].Resource.Name != k8scorev1.ResourceCPU ||
		byV2.Spec.Metrics[0].Resource.Target.AverageUtilization == nil || *byV2.Spec.Metrics[0].Resource.Target.AverageUtilization != 50 ||
		byV2.Spec.MinReplicas == nil || *byV2.Spec.MinReplicas != 1 {
		t.Fatalf("v1-created, read as v2: %+v", byV2.Spec)
	}

	// kube's validation, in either version.
	five := int32(5)
	_, err = v1c.Create(ctx, &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec: autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"},
			MaxReplicas: 3, MinReplicas: &five}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`") {
		t.Fatalf("v1 minReplicas above maxReplicas: %v, want 422 on spec.maxReplicas", err)
	}
	_, err = v2c.Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment"}, MaxReplicas: 3}},
		metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.scaleTargetRef.name") {
		t.Fatalf("v2 without a target name: %v, want 422 on spec.scaleTargetRef.name", err)
	}

	// /status through v1: the status is written, the spec is not.
	cur, err := v1c.Get(ctx, "cpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.CurrentReplicas, cur.Status.DesiredReplicas = 2, 3
	cur.Spec.MaxReplicas = 9
	if _, err := v1c.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("v1 status: %v", err)
	}
	byV2, err = v2c.Get(ctx, "cpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if byV2.Status.CurrentReplicas != 2 || byV2.Status.DesiredReplicas != 3 || byV2.Spec.MaxReplicas != 3 {
		t.Fatalf("after the v1 status update: spec.maxReplicas %d status %+v", byV2.Spec.MaxReplicas, byV2.Status)
	}

	// Discovery: both versions, v2 preferred, in both documents.
	g, err := cs.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, grp := range g.Groups {
		if grp.Name != "autoscaling" {
			continue
		}
		found = true
		var vs []string
		for _, v := range grp.Versions {
			vs = append(vs, v.GroupVersion)
		}
		if strings.Join(vs, ",") != "autoscaling/v2,autoscaling/v1" || grp.PreferredVersion.GroupVersion != "autoscaling/v2" {
			t.Fatalf("autoscaling group: versions %v preferred %s", vs, grp.PreferredVersion.GroupVersion)
		}
	}
	if !found {
		t.Fatal("no autoscaling group in /apis")
	}
	for _, gv := range []string{"autoscaling/v1", "autoscaling/v2"} {
		l, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatalf("%s: %v", gv, err)
		}
		var names []string
		for _, r := range l.APIResources {
			names = append(names, r.Name)
		}
		if strings.Join(names, ",") != "horizontalpodautoscalers,horizontalpodautoscalers/status" {
			t.Fatalf("%s resources %v", gv, names)
		}
	}
	admin := s.client(t, adminToken)
	code, body, _ := do(t, admin, "GET", s.url+"/apis", "", "", "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	var versions []string
	for _, g := range body["items"].([]any) {
		gm := g.(map[string]any)
		if path(gm, "metadata.name") != "autoscaling" {
			continue
		}
		for _, v := range gm["versions"].([]any) {
			vm := v.(map[string]any)
			for _, r := range vm["resources"].([]any) {
				rm := r.(map[string]any)
				versions = append(versions, vm["version"].(string)+":"+rm["resource"].(string)+":"+path(rm, "responseKind.version").(string))
			}
		}
	}
	if code != 200 || strings.Join(versions, ",") != "v2:horizontalpodautoscalers:v2,v1:horizontalpodautoscalers:v1" {
		t.Fatalf("aggregated autoscaling: %d %v", code, versions)
	}
}
