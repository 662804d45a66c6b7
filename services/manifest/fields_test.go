package manifest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	pf "github.com/podflow/podflow/proto/corev1"
)

// envAndHooksPod uses the container fields the node agent honours beyond
// plain env: valueFrom.resourceFieldRef, envFrom and lifecycle hooks.
const envAndHooksPod = `
apiVersion: v1
kind: Pod
metadata: {name: hooks, namespace: prod}
spec:
  containers:
  - name: web
    image: web:1
    env:
    - name: MEM
      valueFrom: {resourceFieldRef: {containerName: web, resource: limits.memory, divisor: 1Mi}}
    envFrom:
    - prefix: CFG_
      configMapRef: {name: web-config, optional: true}
    - secretRef: {name: web-creds}
    lifecycle:
      postStart:
        exec: {command: [sh, -c, "echo started > /tmp/marker"]}
      preStop:
        sleep: {seconds: 5}
  - name: side
    image: web:1
    lifecycle:
      postStart:
        httpGet: {path: /warm, port: 8080, scheme: HTTP}
      preStop:
        tcpSocket: {port: 8080}
`

func TestEnvFromAndLifecycleFields(t *testing.T) {
	obj := decodeOne(t, []byte(envAndHooksPod))
	if len(obj.Warnings) != 0 {
		t.Errorf("warnings %q, want none", obj.Warnings)
	}
	pod := obj.Message.(*pf.Pod)
	web, side := pod.GetSpec().GetContainers()[0], pod.GetSpec().GetContainers()[1]
	checks := []struct {
		name      string
		got, want any
	}{
		{"resourceFieldRef resource", web.GetEnv()[0].GetValueFrom().GetResourceFieldRef().GetResource(), "limits.memory"},
		{"resourceFieldRef divisor", web.GetEnv()[0].GetValueFrom().GetResourceFieldRef().GetDivisor(), "1Mi"},
		{"resourceFieldRef containerName", web.GetEnv()[0].GetValueFrom().GetResourceFieldRef().GetContainerName(), "web"},
		{"envFrom prefix", web.GetEnvFrom()[0].GetPrefix(), "CFG_"},
		{"envFrom configMapRef", web.GetEnvFrom()[0].GetConfigMapRef().GetName(), "web-config"},
		{"envFrom optional", web.GetEnvFrom()[0].GetConfigMapRef().GetOptional(), true},
		{"envFrom secretRef", web.GetEnvFrom()[1].GetSecretRef().GetName(), "web-creds"},
		{"postStart exec", web.GetLifecycle().GetPostStart().GetExec().GetCommand()[0], "sh"},
		{"preStop sleep", web.GetLifecycle().GetPreStop().GetSleep().GetSeconds(), int64(5)},
		{"postStart httpGet", side.GetLifecycle().GetPostStart().GetHttpGet().GetPort().GetIntVal(), int32(8080)},
		{"preStop tcpSocket", side.GetLifecycle().GetPreStop().GetTcpSocket().GetPort().GetIntVal(), int32(8080)},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmpDiff(tc.want, tc.got); diff != "" {
				t.Errorf("%s", diff)
			}
		})
	}
	for _, f := range []Format{FormatYAML, FormatJSON} {
		t.Run("round trip "+f.String(), func(t *testing.T) { roundTrip(t, pod, f) })
	}
	t.Run("k8s.io/api both ways", func(t *testing.T) {
		ko, err := ToKube(pod)
		if err != nil {
			t.Fatal(err)
		}
		kc := ko.(*corev1.Pod).Spec.Containers[0]
		if got := kc.Lifecycle.PreStop.Sleep.Seconds; got != 5 {
			t.Errorf("preStop sleep = %d, want 5", got)
		}
		if got := kc.Env[0].ValueFrom.ResourceFieldRef.Divisor.String(); got != "1Mi" {
			t.Errorf("divisor = %q, want 1Mi", got)
		}
		if got := kc.EnvFrom[0].ConfigMapRef; got.Name != "web-config" || got.Optional == nil || !*got.Optional {
			t.Errorf("envFrom configMapRef = %+v", got)
		}
		fromKubeIs(t, ko, pod)
	})
}

// podNamespacesPod uses the pod-level fields of the node's isolation:
// shareProcessNamespace, securityContext.fsGroupChangePolicy.
const podNamespacesPod = `
apiVersion: v1
kind: Pod
metadata: {name: shared, namespace: prod}
spec:
  shareProcessNamespace: true
  securityContext: {fsGroup: 2000, fsGroupChangePolicy: OnRootMismatch}
  containers:
  - {name: web, image: web:1}
`

func TestPodIsolationFields(t *testing.T) {
	obj := decodeOne(t, []byte(podNamespacesPod))
	if len(obj.Warnings) != 0 {
		t.Errorf("warnings %q, want none", obj.Warnings)
	}
	pod := obj.Message.(*pf.Pod)
	if pod.GetSpec().ShareProcessNamespace == nil || !pod.GetSpec().GetShareProcessNamespace() {
		t.Errorf("shareProcessNamespace = %v, want true", pod.GetSpec().ShareProcessNamespace)
	}
	if got := pod.GetSpec().GetSecurityContext().GetFsGroupChangePolicy(); got != "OnRootMismatch" {
		t.Errorf("fsGroupChangePolicy = %q, want OnRootMismatch", got)
	}
	for _, f := range []Format{FormatYAML, FormatJSON} {
		t.Run("round trip "+f.String(), func(t *testing.T) { roundTrip(t, pod, f) })
	}
	t.Run("k8s.io/api both ways", func(t *testing.T) {
		ko, err := ToKube(pod)
		if err != nil {
			t.Fatal(err)
		}
		ks := ko.(*corev1.Pod).Spec
		if ks.ShareProcessNamespace == nil || !*ks.ShareProcessNamespace {
			t.Errorf("k8s shareProcessNamespace = %v, want true", ks.ShareProcessNamespace)
		}
		if p := ks.SecurityContext.FSGroupChangePolicy; p == nil || *p != corev1.FSGroupChangeOnRootMismatch {
			t.Errorf("k8s fsGroupChangePolicy = %v, want OnRootMismatch", p)
		}
		fromKubeIs(t, ko, pod)
	})
}

// fromKubeIs checks that FromKube(ko) gives back want.
func fromKubeIs(t *testing.T, ko runtime.Object, want *pf.Pod) {
	t.Helper()
	back, err := FromKube(ko)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmpDiff(want, back); diff != "" {
		t.Errorf("FromKube(ToKube(m)) != m:\n%s", diff)
	}
}

// deadlinePod uses spec.activeDeadlineSeconds and termination messages.
const deadlinePod = `
apiVersion: v1
kind: Pod
metadata: {name: batch, namespace: prod}
spec:
  activeDeadlineSeconds: 600
  restartPolicy: Never
  containers:
  - {name: job, image: job:1, terminationMessagePath: /tmp/why, terminationMessagePolicy: FallbackToLogsOnError}
`

func TestActiveDeadlineSecondsField(t *testing.T) {
	obj := decodeOne(t, []byte(deadlinePod))
	pod := obj.Message.(*pf.Pod)
	if got := pod.GetSpec().GetActiveDeadlineSeconds(); got != 600 {
		t.Fatalf("activeDeadlineSeconds = %d, want 600", got)
	}
	if c := pod.GetSpec().GetContainers()[0]; c.GetTerminationMessagePath() != "/tmp/why" || c.GetTerminationMessagePolicy() != "FallbackToLogsOnError" {
		t.Errorf("termination message path %q policy %q", c.GetTerminationMessagePath(), c.GetTerminationMessagePolicy())
	}
	if errs := RefusedPodFields(pod); len(errs) != 0 {
		t.Errorf("RefusedPodFields: %v, want none", errs)
	}
	for _, f := range []Format{FormatYAML, FormatJSON} {
		t.Run("round trip "+f.String(), func(t *testing.T) { roundTrip(t, pod, f) })
	}
	ko, err := ToKube(pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := ko.(*corev1.Pod).Spec.ActiveDeadlineSeconds; got == nil || *got != 600 {
		t.Errorf("k8s.io/api activeDeadlineSeconds = %v, want 600", got)
	}
	fromKubeIs(t, ko, pod)
}

// projectedPod uses every honoured field of a projected volume.
const projectedPod = `
apiVersion: v1
kind: Pod
metadata: {name: proj, namespace: prod}
spec:
  containers:
  - name: web
    image: web:1
    volumeMounts: [{name: all, mountPath: /etc/all}]
  volumes:
  - name: all
    projected:
      defaultMode: 0440
      sources:
      - configMap: {name: web-config, optional: true, items: [{key: greeting, path: greeting, mode: 0400}]}
      - secret: {name: web-creds, items: [{key: pass, path: creds/pass}]}
      - downwardAPI:
          items:
          - {path: labels, fieldRef: {fieldPath: metadata.labels}, mode: 0600}
          - {path: cpu, resourceFieldRef: {containerName: web, resource: limits.cpu, divisor: 1m}}
`

func TestProjectedVolumeFields(t *testing.T) {
	pod := decodeOne(t, []byte(projectedPod)).Message.(*pf.Pod)
	src := pod.GetSpec().GetVolumes()[0].GetProjected()
	s := src.GetSources()
	checks := []struct {
		name      string
		got, want any
	}{
		{"defaultMode", src.GetDefaultMode(), int32(0o440)},
		{"configMap name", s[0].GetConfigMap().GetName(), "web-config"},
		{"configMap optional", s[0].GetConfigMap().GetOptional(), true},
		{"configMap item mode", s[0].GetConfigMap().GetItems()[0].GetMode(), int32(0o400)},
		{"secret name", s[1].GetSecret().GetName(), "web-creds"},
		{"secret item path", s[1].GetSecret().GetItems()[0].GetPath(), "creds/pass"},
		{"downwardAPI fieldRef", s[2].GetDownwardApi().GetItems()[0].GetFieldRef().GetFieldPath(), "metadata.labels"},
		{"downwardAPI mode", s[2].GetDownwardApi().GetItems()[0].GetMode(), int32(0o600)},
		{"downwardAPI resourceFieldRef", s[2].GetDownwardApi().GetItems()[1].GetResourceFieldRef().GetDivisor(), "1m"},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmpDiff(tc.want, tc.got); diff != "" {
				t.Errorf("%s", diff)
			}
		})
	}
	for _, f := range []Format{FormatYAML, FormatJSON} {
		t.Run("round trip "+f.String(), func(t *testing.T) { roundTrip(t, pod, f) })
	}
	t.Run("k8s.io/api both ways", func(t *testing.T) {
		ko, err := ToKube(pod)
		if err != nil {
			t.Fatal(err)
		}
		kv := ko.(*corev1.Pod).Spec.Volumes[0].Projected
		if kv == nil || len(kv.Sources) != 3 || kv.Sources[1].Secret == nil || kv.Sources[1].Secret.Name != "web-creds" {
			t.Fatalf("projected = %+v", kv)
		}
		fromKubeIs(t, ko, pod)
	})
	if errs := RefusedPodFields(pod); len(errs) != 0 {
		t.Errorf("refused %v, want none", errs)
	}
}

// TestAttachFields: stdin, stdinOnce and tty reach the proto (the Linux
// node holds the container's stdin and terminal for attaches).
func TestAttachFields(t *testing.T) {
	obj := decodeOne(t, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: i, stdin: true, stdinOnce: true, tty: true}]\n"))
	pod := obj.Message.(*pf.Pod)
	if c := pod.GetSpec().GetContainers()[0]; !c.GetStdin() || !c.GetStdinOnce() || !c.GetTty() {
		t.Fatalf("container %v: stdin, stdinOnce and tty not all set", c)
	}
	if errs := RefusedPodFields(pod); len(errs) != 0 {
		t.Errorf("RefusedPodFields: %v, want none", errs)
	}
}

const csiPod = `apiVersion: v1
kind: Pod
metadata: {name: csi-inline}
spec:
  containers: [{name: app, image: busybox, volumeMounts: [{name: vol2, mountPath: /mnt/vol2}]}]
  volumes:
  - name: vol1
    csi: {driver: e2e.example.com}
  - name: vol2
    csi:
      driver: e2e.example.com
      readOnly: true
      fsType: ext4
      volumeAttributes: {size: 1Gi}
      nodePublishSecretRef: {name: publish}
`

// TestCSIVolumeFields: inline csi volumes (the CSIInlineVolumes
// conformance test's) reach the proto, go back to k8s.io/api unchanged and
// are not refused.
func TestCSIVolumeFields(t *testing.T) {
	pod := decodeOne(t, []byte(csiPod)).Message.(*pf.Pod)
	v1, v2 := pod.GetSpec().GetVolumes()[0].GetCsi(), pod.GetSpec().GetVolumes()[1].GetCsi()
	checks := []struct {
		name      string
		got, want any
	}{
		{"driver", v1.GetDriver(), "e2e.example.com"},
		{"readOnly unset", v1.ReadOnly == nil && v1.FsType == nil, true},
		{"readOnly", v2.GetReadOnly(), true},
		{"fsType", v2.GetFsType(), "ext4"},
		{"volumeAttributes", v2.GetVolumeAttributes()["size"], "1Gi"},
		{"nodePublishSecretRef", v2.GetNodePublishSecretRef().GetName(), "publish"},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmpDiff(tc.want, tc.got); diff != "" {
				t.Errorf("%s", diff)
			}
		})
	}
	for _, f := range []Format{FormatYAML, FormatJSON} {
		t.Run("round trip "+f.String(), func(t *testing.T) { roundTrip(t, pod, f) })
	}
	t.Run("k8s.io/api both ways", func(t *testing.T) {
		ko, err := ToKube(pod)
		if err != nil {
			t.Fatal(err)
		}
		kv := ko.(*corev1.Pod).Spec.Volumes[1].CSI
		if kv == nil || kv.Driver != "e2e.example.com" || kv.ReadOnly == nil || !*kv.ReadOnly || kv.FSType == nil || *kv.FSType != "ext4" ||
			kv.NodePublishSecretRef == nil || kv.NodePublishSecretRef.Name != "publish" || kv.VolumeAttributes["size"] != "1Gi" {
			t.Fatalf("csi = %+v", kv)
		}
		fromKubeIs(t, ko, pod)
	})
	if errs := RefusedPodFields(pod); len(errs) != 0 {
		t.Errorf("refused %v, want none", errs)
	}
}
