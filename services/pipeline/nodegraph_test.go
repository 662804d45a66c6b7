package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// graphPod is a pod bound to node that mounts Secret secret and takes an
// env var from ConfigMap cm.
func graphPod(name, node, secret, cm string) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
		Spec: &corev1.PodSpec{
			NodeName: node,
			Volumes:  []*corev1.Volume{{Name: "s", Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
			Containers: []*corev1.Container{{Name: "c", Env: []*corev1.EnvVar{
				{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.KeySelector{Name: cm, Key: "x"}}},
			}}},
		},
	}
}

// pullPod is a pod bound to node that pulls its image with Secret secret.
func pullPod(name, node, secret string) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
		Spec: &corev1.PodSpec{NodeName: node, ImagePullSecrets: []*corev1.LocalObjectReference{{Name: secret}},
			Containers: []*corev1.Container{{Name: "c"}}},
	}
}

// projectedPod is a pod bound to node whose projected volume takes Secret
// secret and ConfigMap cm, and whose container takes its environment from
// Secret envSecret and ConfigMap envCM (envFrom).
func projectedPod(name, node, secret, cm, envSecret, envCM string) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
		Spec: &corev1.PodSpec{
			NodeName: node,
			Volumes: []*corev1.Volume{{Name: "all", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{Name: secret}},
				{ConfigMap: &corev1.ConfigMapProjection{Name: cm}},
				{DownwardApi: &corev1.DownwardAPIProjection{}},
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			}}}},
			Containers: []*corev1.Container{{Name: "c", EnvFrom: []*corev1.EnvFromSource{
				{SecretRef: &corev1.SecretEnvSource{Name: envSecret}}, {ConfigMapRef: &corev1.ConfigMapEnvSource{Name: envCM}},
			}}},
		},
	}
}

// TestNodeAuthorizerGraph: against the real store with podflow's policies,
// node n1's identity reads its own Node, the pods bound to it and the
// Secrets and ConfigMaps they reference (imagePullSecrets too) — and is refused (CODE_FORBIDDEN)
// n2's Node, n2's pod, the Secret and ConfigMap only n2's pod references
// and a Secret no pod references, even through a transaction's compare;
// its list of every pod (the agent's reconcile) and of every Secret
// returns its own only. The api stage still reads everything.
func TestNodeAuthorizerGraph(t *testing.T) {
	t.Parallel()
	srv, _ := lockedDown(t)
	client := storeWithPolicy(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	admin := objects.New(client("admin", ""))
	for _, o := range []objects.Object{
		&corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n1"}},
		&corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n2"}},
		graphPod("p1", "n1", "s1", "c1"),
		graphPod("p2", "n2", "s2", "c2"),
		pullPod("p3", "n1", "pull1"),
		pullPod("p4", "n2", "pull2"),
		projectedPod("p5", "n1", "ps1", "pc1", "es1", "ec1"),
		projectedPod("p6", "n2", "ps2", "pc2", "es2", "ec2"),
		&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "pull1", Namespace: "default"}, Type: "kubernetes.io/dockerconfigjson"},
		&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "pull2", Namespace: "default"}, Type: "kubernetes.io/dockerconfigjson"},
		&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "s1", Namespace: "default"}, Data: map[string][]byte{"k": []byte("one")}},
		&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "s2", Namespace: "default"}, Data: map[string][]byte{"k": []byte("two")}},
		&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "nobody", Namespace: "default"}},
		&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "c1", Namespace: "default"}},
		&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "c2", Namespace: "default"}},
	} {
		if _, err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"ps1", "es1", "ps2", "es2"} {
		if _, err := admin.Create(ctx, &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: n, Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"pc1", "ec1", "pc2", "ec2"} {
		if _, err := admin.Create(ctx, &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: n, Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	n1raw := client(pipeline.NodeRole("n1"), pipeline.NodeRole("n1"))
	n1 := objects.New(n1raw)
	get := func(k objects.Kind, ns, name string) error {
		_, err := n1.GetKind(ctx, k, ns, name)
		return err
	}
	for _, c := range []struct {
		kind      objects.Kind
		ns, name  string
		forbidden bool
	}{
		{objects.Nodes, "", "n1", false},
		{objects.Nodes, "", "n2", true},
		{objects.Pods, "default", "p1", false},
		{objects.Pods, "default", "p2", true},
		{objects.Secrets, "default", "s1", false},
		{objects.Secrets, "default", "s2", true},
		{objects.Secrets, "default", "nobody", true},
		{objects.Secrets, "other", "s1", true},       // another namespace's Secret of that name
		{objects.Secrets, "default", "pull1", false}, // p3's imagePullSecrets
		{objects.Secrets, "default", "pull2", true},  // only n2's p4 pulls with it
		{objects.ConfigMaps, "default", "c1", false},
		{objects.ConfigMaps, "default", "c2", true},
		{objects.Secrets, "default", "ps1", false}, // p5's projected volume
		{objects.ConfigMaps, "default", "pc1", false},
		{objects.Secrets, "default", "es1", false}, // p5's envFrom
		{objects.ConfigMaps, "default", "ec1", false},
		{objects.Secrets, "default", "ps2", true}, // only n2's p6 projects it
		{objects.ConfigMaps, "default", "pc2", true},
		{objects.Secrets, "default", "es2", true},
		{objects.ConfigMaps, "default", "ec2", true},
	} {
		err := get(c.kind, c.ns, c.name)
		if c.forbidden && !errors.Is(err, raftstore.ErrForbidden) {
			t.Errorf("node n1 reads %s %s/%s: %v, want ErrForbidden", c.kind.Name, c.ns, c.name, err)
		}
		if !c.forbidden && err != nil {
			t.Errorf("node n1 cannot read %s %s/%s: %v", c.kind.Name, c.ns, c.name, err)
		}
	}
	if err := get(objects.Pods, "default", "gone"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("node n1 gets a pod that is not stored: %v, want not found", err)
	}
	pods, _, err := objects.List[*corev1.Pod](ctx, n1, "")
	if err != nil || len(pods) != 3 || pods[0].GetMetadata().GetName() != "p1" || pods[1].GetMetadata().GetName() != "p3" || pods[2].GetMetadata().GetName() != "p5" {
		t.Errorf("node n1 lists pods %v (%v), want its own p1, p3 and p5 only", pods, err)
	}
	secrets, _, err := objects.List[*corev1.Secret](ctx, n1, "")
	var names []string
	for _, s := range secrets {
		names = append(names, s.GetMetadata().GetName())
	}
	if err != nil || !slices.Equal(names, []string{"es1", "ps1", "pull1", "s1"}) {
		t.Errorf("node n1 lists Secrets %v (%v), want es1, ps1, pull1 and s1 only", names, err)
	}
	_, err = n1raw.Txn(ctx, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: objects.Secrets.Key("default", "s2"), ModRevision: -1}},
		Ops:      []raftstore.Op{{Type: raftstore.OpPut, Key: objects.Events.Key("default", "probe"), Value: []byte("x")}},
	})
	if !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("node n1 compares n2's Secret: %v, want ErrForbidden", err)
	}
	scheduler := client(pipeline.StageRole(pipeline.Scheduler), pipeline.StageRole(pipeline.Scheduler))
	_, err = scheduler.Txn(ctx, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: objects.Secrets.Key("default", "s1"), ModRevision: -1}},
		Ops:      []raftstore.Op{{Type: raftstore.OpPut, Key: objects.Events.Key("default", "probe"), Value: []byte("x")}},
	})
	if !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("the scheduler compares a Secret: %v, want ErrForbidden", err)
	}
	api := objects.New(client(pipeline.StageRole(pipeline.API), pipeline.StageRole(pipeline.API)))
	if _, err := api.GetKind(ctx, objects.Secrets, "default", "s2"); err != nil {
		t.Errorf("the api stage reads n2's Secret: %v", err)
	}
}

// TestPodReferences: the Secrets and ConfigMaps a pod references are
// every one Kubernetes' node authorizer graph has as an edge — a
// projected volume's sources (kube-api-access' kube-root-ca.crt),
// envFrom, and ephemeral containers' env as well as volumes, env
// valueFrom and imagePullSecrets — so that its node may read them and
// nothing else.
func TestPodReferences(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{Spec: &corev1.PodSpec{
		ImagePullSecrets: []*corev1.LocalObjectReference{{Name: "pull"}},
		Volumes: []*corev1.Volume{
			{Name: "s", Secret: &corev1.SecretVolumeSource{SecretName: "vol-secret"}},
			{Name: "c", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "vol-cm"}},
			{Name: "inline", Csi: &corev1.CSIVolumeSource{Driver: "d.example.com", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-publish"}}},
			{Name: "kube-api-access", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{Name: "kube-root-ca.crt"}},
				{Secret: &corev1.SecretProjection{Name: "projected-secret"}},
			}}},
		},
		InitContainers: []*corev1.Container{{Name: "i", EnvFrom: []*corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{Name: "init-envfrom-cm"}}}}},
		Containers: []*corev1.Container{{Name: "c",
			Env:     []*corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.KeySelector{Name: "env-secret", Key: "x"}}}},
			EnvFrom: []*corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{Name: "envfrom-secret"}}}}},
		EphemeralContainers: []*corev1.EphemeralContainer{{Name: "debug",
			Env: []*corev1.EnvVar{{Name: "Y", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.KeySelector{Name: "ephemeral-cm", Key: "y"}}}}}},
	}}
	secrets, configMaps := pipeline.PodReferences(pod)
	slices.Sort(secrets)
	slices.Sort(configMaps)
	if want := []string{"csi-publish", "env-secret", "envfrom-secret", "projected-secret", "pull", "vol-secret"}; !slices.Equal(secrets, want) {
		t.Errorf("secrets %v, want %v", secrets, want)
	}
	if want := []string{"ephemeral-cm", "init-envfrom-cm", "kube-root-ca.crt", "vol-cm"}; !slices.Equal(configMaps, want) {
		t.Errorf("configMaps %v, want %v", configMaps, want)
	}
}
