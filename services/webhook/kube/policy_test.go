package kube_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/webhook"
)

func deployment(name string, replicas int32, labels map[string]string) *webhook.Request {
	m, err := manifest.FromKube(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: k8scorev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "app", Image: "busybox"}}}}}})
	if err != nil {
		panic(err)
	}
	kind, _ := objects.KindForResource("deployments.apps")
	return &webhook.Request{Operation: webhook.Create, Kind: kind, Namespace: "default", Name: name, Object: m.(objects.Object)}
}

// TestPolicyWithParamDeniesAndWarns: a ValidatingAdmissionPolicy reading
// its limit from a ConfigMap param denies past it (Deny), and another
// bound with Warn only warns.
func TestPolicyWithParamDeniesAndWarns(t *testing.T) {
	e := newEnv(t, nil)
	e.put(&k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits", Namespace: "default"}, Data: map[string]string{"maxReplicas": "2"}})
	rules := &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
		}}}}
	e.put(&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: rules,
			Variables:        []admissionregistrationv1.Variable{{Name: "max", Expression: "int(params.data.maxReplicas)"}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= variables.max",
				MessageExpression: "'replicas ' + string(object.spec.replicas) + ' above ' + string(variables.max)"}},
		}})
	e.put(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "replicas-binding"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "replicas",
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "default", ParameterNotFoundAction: ptr(admissionregistrationv1.DenyAction)},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}})
	e.put(&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: rules,
			Validations: []admissionregistrationv1.Validation{{Expression: "has(object.metadata.labels) && 'team' in object.metadata.labels",
				Message: "every deployment names its team"}}}})
	e.put(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "team-binding"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "team",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}}})

	var res webhook.Result
	eventually(t, "the denial", func() bool {
		res = e.adm.Validate(context.Background(), deployment("big", 3, map[string]string{"team": "a"}))
		return !res.Allowed()
	})
	want := "ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding' denied request: replicas 3 above 2"
	if res.Status.GetCode() != 422 || res.Status.GetReason() != "Invalid" || !strings.Contains(res.Status.GetMessage(), want) {
		t.Fatalf("status: %v\nwant %q", res.Status, want)
	}
	if n := len(res.Calls); n == 0 || res.Calls[n-1].Verdict != webhook.Denied || res.Calls[n-1].Name != "replicas" {
		t.Fatalf("calls: %+v", res.Calls)
	}

	eventually(t, "the warning", func() bool {
		res = e.adm.Validate(context.Background(), deployment("small", 1, nil))
		return len(res.Warnings) > 0
	})
	if !res.Allowed() {
		t.Fatalf("a Warn binding denied: %v", res.Status)
	}
	if w := "Validation failed for ValidatingAdmissionPolicy 'team' with binding 'team-binding': every deployment names its team"; res.Warnings[0] != w {
		t.Fatalf("warnings: %q", res.Warnings)
	}
	if !strings.Contains(res.AuditAnnotations["validation.policy.admission.k8s.io/validation_failure"], "every deployment names its team") {
		t.Fatalf("audit annotations: %v", res.AuditAnnotations)
	}
	if len(res.Calls) == 0 || res.Calls[0].Verdict != webhook.Warned || res.Calls[0].Name != "team" {
		t.Fatalf("calls: %+v", res.Calls)
	}
	if res := e.adm.Validate(context.Background(), deployment("fine", 2, map[string]string{"team": "a"})); !res.Allowed() || len(res.Warnings) != 0 {
		t.Fatalf("a deployment within both policies: %v %v", res.Status, res.Warnings)
	}
}
