package manifest

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	pf "github.com/podflow/podflow/proto/corev1"
)

func readExample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeOne(t *testing.T, data []byte) Object {
	t.Helper()
	objs, err := Decode(data)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(objs) != 1 {
		t.Fatalf("Decode: %d objects, want 1", len(objs))
	}
	return objs[0]
}

// roundTrip asserts YAML -> proto -> format -> proto is the identity on the
// proto, and returns the encoded form.
func roundTrip(t *testing.T, m proto.Message, format Format) []byte {
	t.Helper()
	out, err := Encode(m, format)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	again := decodeOne(t, out)
	if diff := cmpDiff(m, again.Message); diff != "" {
		t.Fatalf("round trip through %s changed the object:\n%s\nencoded:\n%s", format, diff, out)
	}
	return out
}

func TestSeedPod(t *testing.T) {
	obj := decodeOne(t, readExample(t, "nginx-pod.yaml"))
	want := &pf.Pod{
		Metadata: &pf.ObjectMeta{Name: "my-nginx-pod", Labels: map[string]string{"app": "nginx"}},
		Spec: &pf.PodSpec{Containers: []*pf.Container{{
			Name:      "nginx-container",
			Image:     "nginx",
			Ports:     []*pf.ContainerPort{{ContainerPort: 80}},
			Resources: &pf.ResourceRequirements{},
		}}},
		Status: &pf.PodStatus{},
	}
	if obj.APIVersion != "v1" || obj.Kind != "Pod" {
		t.Errorf("got %s/%s, want v1/Pod", obj.APIVersion, obj.Kind)
	}
	if diff := cmpDiff(want, obj.Message); diff != "" {
		t.Errorf("decoded pod differs:\n%s", diff)
	}
	if len(obj.Warnings) != 0 {
		t.Errorf("warnings %q, want none", obj.Warnings)
	}
	for _, f := range []Format{FormatYAML, FormatJSON} {
		out := roundTrip(t, obj.Message, f)
		if !strings.Contains(string(out), "apiVersion") || !strings.Contains(string(out), "Pod") {
			t.Errorf("%s output lacks apiVersion/kind:\n%s", f, out)
		}
	}
}

func TestSeedService(t *testing.T) {
	obj := decodeOne(t, readExample(t, "nginx-service.yaml"))
	svc, ok := obj.Message.(*pf.Service)
	if !ok {
		t.Fatalf("got %T, want *corev1.Service", obj.Message)
	}
	if svc.GetMetadata().GetName() != "my-nginx" || svc.GetSpec().GetSelector()["app"] != "nginx" {
		t.Errorf("metadata/selector: %v", svc)
	}
	p := svc.GetSpec().GetPorts()
	if len(p) != 1 || p[0].GetPort() != 80 || p[0].GetTargetPort().GetIntVal() != 80 || p[0].GetProtocol() != "TCP" {
		t.Errorf("ports: %v", p)
	}
	if len(obj.Warnings) != 0 {
		t.Errorf("warnings %q, want none (empty status.loadBalancer is not news)", obj.Warnings)
	}
	roundTrip(t, svc, FormatYAML)
}

const richPod = `
apiVersion: v1
kind: Pod
metadata:
  name: rich
  namespace: prod
  labels: {app: web, tier: front}
  annotations: {note: "hello"}
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: "u-1", controller: true}
spec:
  serviceAccountName: web
  nodeSelector: {disk: ssd}
  terminationGracePeriodSeconds: 45
  hostNetwork: false
  priority: 7
  dnsPolicy: None
  dnsConfig:
    nameservers: [10.244.1.1]
    searches: [default.svc.cluster.local]
    options: [{name: ndots, value: "2"}, {name: edns0}]
  securityContext:
    runAsUser: 1000
    runAsNonRoot: true
    fsGroup: 2000
    supplementalGroups: [3000, 4000]
    seccompProfile: {type: RuntimeDefault}
    sysctls: [{name: net.core.somaxconn, value: "1024"}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: zone, operator: In, values: [a, b]}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        preference:
          matchExpressions: [{key: gpu, operator: Exists}]
  tolerations:
  - {key: dedicated, operator: Equal, value: web, effect: NoSchedule}
  - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 300}
  volumes:
  - name: cache
    emptyDir: {medium: Memory, sizeLimit: 64Mi}
  - name: cfg
    configMap:
      name: web-config
      defaultMode: 0644
      items: [{key: app.conf, path: conf/app.conf, mode: 0400}]
  - name: creds
    secret: {secretName: web-creds, optional: true}
  - name: host
    hostPath: {path: /var/log, type: Directory}
  - name: data
    persistentVolumeClaim: {claimName: web-data, readOnly: true}
  - name: podinfo
    downwardAPI:
      defaultMode: 0440
      items:
      - {path: labels, fieldRef: {apiVersion: v1, fieldPath: metadata.labels}, mode: 0400}
      - {path: cpu, resourceFieldRef: {containerName: web, resource: limits.cpu, divisor: 1m}}
  initContainers:
  - name: proxy
    image: envoy:1.30
    restartPolicy: Always
  containers:
  - name: web
    image: registry.local/web:1.2
    imagePullPolicy: IfNotPresent
    command: [/bin/web]
    args: [--port=8080]
    workingDir: /srv
    ports:
    - {name: http, containerPort: 8080, protocol: TCP}
    - {name: metrics, containerPort: 9090, hostPort: 19090, hostIP: 127.0.0.1}
    env:
    - {name: MODE, value: prod}
    - name: PASSWORD
      valueFrom: {secretKeyRef: {name: web-creds, key: password}}
    - name: LEVEL
      valueFrom: {configMapKeyRef: {name: web-config, key: level, optional: true}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    resources:
      requests: {cpu: "0.5", memory: 128Mi}
      limits: {cpu: "1", memory: 256Mi, ephemeral-storage: 1Gi}
    volumeMounts:
    - {name: cache, mountPath: /cache}
    - {name: cfg, mountPath: /etc/web, readOnly: true, subPath: conf}
    livenessProbe:
      httpGet:
        path: /healthz
        port: http
        scheme: HTTP
        httpHeaders: [{name: X-Probe, value: "1"}]
      initialDelaySeconds: 5
      periodSeconds: 10
      failureThreshold: 3
    readinessProbe:
      tcpSocket: {port: 8080}
      timeoutSeconds: 2
    startupProbe:
      exec: {command: [cat, /tmp/ready]}
      successThreshold: 1
      terminationGracePeriodSeconds: 12
    securityContext:
      privileged: false
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      runAsUser: 1001
      capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}
      seccompProfile: {type: Localhost, localhostProfile: profiles/web.json}
status:
  phase: Running
  hostIP: 10.0.0.2
  podIP: 10.244.1.7
  podIPs: [{ip: 10.244.1.7}]
  qosClass: Burstable
  startTime: "2026-01-02T03:04:05Z"
  conditions:
  - {type: Ready, status: "True", lastTransitionTime: "2026-01-02T03:04:06Z"}
  containerStatuses:
  - name: web
    ready: true
    restartCount: 2
    image: registry.local/web:1.2
    imageID: sha256:abc
    containerID: podflow://123
    started: true
    state: {running: {startedAt: "2026-01-02T03:04:05Z"}}
    lastState: {terminated: {exitCode: 137, signal: 9, reason: OOMKilled, containerID: podflow://122}}
`

func TestRichPod(t *testing.T) {
	obj := decodeOne(t, []byte(richPod))
	pod := obj.Message.(*pf.Pod)
	if len(obj.Warnings) != 0 {
		t.Errorf("warnings %q, want none", obj.Warnings)
	}
	c := pod.GetSpec().GetContainers()[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"quantity normalised", c.GetResources().GetRequests()["cpu"], "500m"},
		{"named probe port", c.GetLivenessProbe().GetHttpGet().GetPort().GetStrVal(), "http"},
		{"numeric probe port", c.GetReadinessProbe().GetTcpSocket().GetPort().GetIntVal(), int32(8080)},
		{"hostIP renamed", c.GetPorts()[1].GetHostIp(), "127.0.0.1"},
		{"podIP renamed", pod.GetStatus().GetPodIp(), "10.244.1.7"},
		{"imageID renamed", pod.GetStatus().GetContainerStatuses()[0].GetImageId(), "sha256:abc"},
		{"lastState renamed", pod.GetStatus().GetContainerStatuses()[0].GetLastTerminationState().GetTerminated().GetExitCode(), int32(137)},
		{"octal mode", pod.GetSpec().GetVolumes()[1].GetConfigMap().GetDefaultMode(), int32(0o644)},
		{"downwardAPI fieldRef", pod.GetSpec().GetVolumes()[5].GetDownwardApi().GetItems()[0].GetFieldRef().GetFieldPath(), "metadata.labels"},
		{"downwardAPI item mode", pod.GetSpec().GetVolumes()[5].GetDownwardApi().GetItems()[0].GetMode(), int32(0o400)},
		{"downwardAPI defaultMode", pod.GetSpec().GetVolumes()[5].GetDownwardApi().GetDefaultMode(), int32(0o440)},
		{"downwardAPI resourceFieldRef", pod.GetSpec().GetVolumes()[5].GetDownwardApi().GetItems()[1].GetResourceFieldRef().GetDivisor(), "1m"},
		{"int64 list", pod.GetSpec().GetSecurityContext().GetSupplementalGroups(), []int64{3000, 4000}},
		{"optional int64", c.GetStartupProbe().GetTerminationGracePeriodSeconds(), int64(12)},
		{"toleration seconds", pod.GetSpec().GetTolerations()[1].GetTolerationSeconds(), int64(300)},
		{"sidecar init container", pod.GetSpec().GetInitContainers()[0].GetRestartPolicy(), "Always"},
		{"timestamp", pod.GetStatus().GetStartTime().AsTime().Unix(), int64(1767323045)},
		{"dnsPolicy", pod.GetSpec().GetDnsPolicy(), "None"},
		{"dnsConfig option", pod.GetSpec().GetDnsConfig().GetOptions()[0].GetValue(), "2"},
		{"dnsConfig nameserver", pod.GetSpec().GetDnsConfig().GetNameservers(), []string{"10.244.1.1"}},
		{"affinity", pod.GetSpec().GetAffinity().GetNodeAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution()[0].GetWeight(), int32(10)},
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
}

func TestKinds(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want proto.Message
	}{
		{"Node", `{apiVersion: v1, kind: Node, metadata: {name: n1}, spec: {podCIDR: 10.244.1.0/24, providerID: x://1, taints: [{key: k, effect: NoSchedule}]}, status: {capacity: {cpu: "4", pods: "110"}, addresses: [{type: InternalIP, address: 10.0.0.1}], nodeInfo: {machineID: m, kubeletVersion: v1.37}}}`,
			&pf.Node{Metadata: &pf.ObjectMeta{Name: "n1"}, Spec: &pf.NodeSpec{PodCidr: "10.244.1.0/24", ProviderId: "x://1", Taints: []*pf.Taint{{Key: "k", Effect: "NoSchedule"}}},
				Status: &pf.NodeStatus{Capacity: map[string]string{"cpu": "4", "pods": "110"}, Addresses: []*pf.NodeAddress{{Type: "InternalIP", Address: "10.0.0.1"}}, NodeInfo: &pf.NodeSystemInfo{MachineId: "m", KubeletVersion: "v1.37"}}}},
		{"EndpointSlice", `{apiVersion: discovery.k8s.io/v1, kind: EndpointSlice, metadata: {name: s, namespace: d}, addressType: IPv4, endpoints: [{addresses: [10.1.1.1], conditions: {ready: true}, nodeName: n1, targetRef: {kind: Pod, name: p}}], ports: [{name: http, port: 80, protocol: TCP}]}`,
			&pf.EndpointSlice{Metadata: &pf.ObjectMeta{Name: "s", Namespace: "d"}, AddressType: "IPv4",
				Endpoints: []*pf.Endpoint{{Addresses: []string{"10.1.1.1"}, Conditions: &pf.EndpointConditions{Ready: proto.Bool(true)}, NodeName: proto.String("n1"), TargetRef: &pf.ObjectReference{Kind: "Pod", Name: "p"}}},
				Ports:     []*pf.EndpointPort{{Name: proto.String("http"), Port: proto.Int32(80), Protocol: proto.String("TCP")}}}},
		{"Namespace", `{apiVersion: v1, kind: Namespace, metadata: {name: dev}}`,
			&pf.Namespace{Metadata: &pf.ObjectMeta{Name: "dev"}, Spec: &pf.NamespaceSpec{}, Status: &pf.NamespaceStatus{}}},
		{"ServiceAccount", `{apiVersion: v1, kind: ServiceAccount, metadata: {name: sa, namespace: dev}, automountServiceAccountToken: false, imagePullSecrets: [{name: reg}]}`,
			&pf.ServiceAccount{Metadata: &pf.ObjectMeta{Name: "sa", Namespace: "dev"}, AutomountServiceAccountToken: proto.Bool(false), ImagePullSecrets: []*pf.LocalObjectReference{{Name: "reg"}}}},
		{"ConfigMap", `{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {a: "1"}, binaryData: {b: AAE=}, immutable: true}`,
			&pf.ConfigMap{Metadata: &pf.ObjectMeta{Name: "c"}, Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {0, 1}}, Immutable: proto.Bool(true)}},
		{"Secret with stringData", `{apiVersion: v1, kind: Secret, metadata: {name: s}, type: Opaque, data: {a: aGk=}, stringData: {b: there}}`,
			&pf.Secret{Metadata: &pf.ObjectMeta{Name: "s"}, Type: "Opaque", Data: map[string][]byte{"a": []byte("hi"), "b": []byte("there")}}},
		{"Role", `{apiVersion: rbac.authorization.k8s.io/v1, kind: Role, metadata: {name: r, namespace: dev}, rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]}`,
			&pf.Role{Metadata: &pf.ObjectMeta{Name: "r", Namespace: "dev"}, Rules: []*pf.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}}},
		{"ClusterRole", `{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: r}, rules: [{nonResourceURLs: [/healthz], verbs: [get]}]}`,
			&pf.ClusterRole{Metadata: &pf.ObjectMeta{Name: "r"}, Rules: []*pf.PolicyRule{{NonResourceUrls: []string{"/healthz"}, Verbs: []string{"get"}}}}},
		{"RoleBinding", `{apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, metadata: {name: b, namespace: dev}, subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}], roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}}`,
			&pf.RoleBinding{Metadata: &pf.ObjectMeta{Name: "b", Namespace: "dev"}, Subjects: []*pf.Subject{{Kind: "User", Name: "alice", ApiGroup: "rbac.authorization.k8s.io"}}, RoleRef: &pf.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "r"}}},
		{"ClusterRoleBinding", `{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRoleBinding, metadata: {name: b}, subjects: [{kind: Group, name: devs}], roleRef: {kind: ClusterRole, name: view}}`,
			&pf.ClusterRoleBinding{Metadata: &pf.ObjectMeta{Name: "b"}, Subjects: []*pf.Subject{{Kind: "Group", Name: "devs"}}, RoleRef: &pf.RoleRef{Kind: "ClusterRole", Name: "view"}}},
		{"Event", `{apiVersion: v1, kind: Event, metadata: {name: e, namespace: dev}, involvedObject: {kind: Pod, name: p, fieldPath: "spec.containers{web}"}, reason: Pulled, message: ok, type: Normal, count: 3, source: {component: nodeagent}}`,
			&pf.Event{Metadata: &pf.ObjectMeta{Name: "e", Namespace: "dev"}, InvolvedObject: &pf.ObjectReference{Kind: "Pod", Name: "p", FieldPath: "spec.containers{web}"}, Reason: "Pulled", Message: "ok", Type: "Normal", Count: 3, Source: &pf.EventSource{Component: "nodeagent"}}},
		{"LimitRange", `{apiVersion: v1, kind: LimitRange, metadata: {name: l}, spec: {limits: [{type: Container, default: {cpu: 500m}, defaultRequest: {cpu: 100m}, max: {memory: 1Gi}}]}}`,
			&pf.LimitRange{Metadata: &pf.ObjectMeta{Name: "l"}, Spec: &pf.LimitRangeSpec{Limits: []*pf.LimitRangeItem{{Type: "Container", Default: map[string]string{"cpu": "500m"}, DefaultRequest: map[string]string{"cpu": "100m"}, Max: map[string]string{"memory": "1Gi"}}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeOne(t, []byte(tc.yaml))
			if diff := cmpDiff(tc.want, obj.Message); diff != "" {
				t.Fatalf("decoded differs:\n%s", diff)
			}
			if av, k := KindOf(obj.Message); av != obj.APIVersion || k != obj.Kind {
				t.Errorf("KindOf = %s/%s, Decode said %s/%s", av, k, obj.APIVersion, obj.Kind)
			}
			roundTrip(t, obj.Message, FormatYAML)
			roundTrip(t, obj.Message, FormatJSON)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name      string
		input     string
		opts      []Option
		sentinel  error
		doc       int
		field     string
		kind, obj string
	}{
		{"unknown field with path", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: i\n    imagePullPolcy: Always\n",
			nil, ErrUnknownField, 0, "spec.containers[0].imagePullPolcy", "Pod", "p"},
		{"unknown top-level field", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"dta":{}}`,
			nil, ErrUnknownField, 0, "dta", "ConfigMap", "c"},
		{"unknown field in second document", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b, lables: {}}\n",
			nil, ErrUnknownField, 1, "metadata.lables", "Namespace", "b"},
		{"duplicate JSON field", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","name":"q"}}`,
			nil, ErrDuplicateField, 0, "metadata.name", "Pod", "q"},
		{"duplicate YAML key", "apiVersion: v1\nkind: Pod\nkind: Pod\n", nil, ErrDuplicateField, 0, "", "", ""},
		{"unsupported kind", "apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: d}\n", nil, ErrUnsupportedKind, 0, "", "Deployment", "d"},
		{"wrong group for kind", "apiVersion: v1\nkind: EndpointSlice\n", nil, ErrUnsupportedKind, 0, "", "EndpointSlice", ""},
		{"missing kind", "metadata: {name: x}\n", nil, ErrUnsupportedKind, 0, "", "", "x"},
		{"wrong value type", "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: 5, image: [x]}]}\n", nil, ErrMalformed, 0, "", "Pod", ""},
		{"not an object", "- a\n- b\n", nil, ErrMalformed, 0, "", "", ""},
		{"bad YAML", "a: [\n", nil, ErrMalformed, 0, "", "", ""},
		{"bad JSON", `{"apiVersion": "v1",`, nil, ErrMalformed, 0, "", "", ""},
		{"too large", strings.Repeat("#", 101), []Option{WithMaxBytes(100)}, ErrTooLarge, 0, "", "", ""},
		{"too many objects", "apiVersion: v1\nkind: Namespace\n---\napiVersion: v1\nkind: Namespace\n",
			[]Option{WithConfig(Config{MaxBytes: 1 << 10, MaxDocuments: 1})}, ErrTooLarge, 1, "", "Namespace", ""},
		{"unknown field in list item", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Namespace"},{"apiVersion":"v1","kind":"Namespace","spec":{"x":1}}]}`,
			nil, ErrUnknownField, 0, "items[1].spec.x", "Namespace", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.input), tc.opts...)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("Decode error = %v, want %v", err, tc.sentinel)
			}
			if objs != nil {
				t.Errorf("Decode returned %d objects with an error", len(objs))
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not a *manifest.Error", err)
			}
			if e.Doc != tc.doc || e.Field != tc.field || e.Kind != tc.kind || e.Name != tc.obj {
				t.Errorf("got doc=%d field=%q kind=%q name=%q, want doc=%d field=%q kind=%q name=%q (%v)",
					e.Doc, e.Field, e.Kind, e.Name, tc.doc, tc.field, tc.kind, tc.obj, err)
			}
			if tc.field != "" && !strings.Contains(err.Error(), `"`+tc.field+`"`) {
				t.Errorf("message %q does not quote the field path", err)
			}
		})
	}
}

func TestSeveralUnknownFieldsAllReported(t *testing.T) {
	_, err := Decode([]byte("apiVersion: v1\nkind: Pod\nspec: {nodeNme: a, containers: [{name: c, imgae: x}]}\n"))
	for _, f := range []string{"spec.nodeNme", "spec.containers[0].imgae"} {
		if !strings.Contains(fmtErr(err), f) {
			t.Errorf("error %v does not name %q", err, f)
		}
	}
	if !errors.Is(err, ErrUnknownField) {
		t.Errorf("error %v is not ErrUnknownField", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestUnsupportedPodFieldsRefused: a Pod field the proto cannot hold is
// refused naming its path (issue 16: nothing is dropped silently), unless
// it is given its Kubernetes default, which means the same as leaving it
// unset.
func TestUnsupportedPodFieldsRefused(t *testing.T) {
	_, err := Decode([]byte(`
apiVersion: v1
kind: Pod
metadata:
  name: p
  selfLink: /api/v1/namespaces/default/pods/p
spec:
  dnsPolicy: ClusterFirst
  setHostnameAsFQDN: true
  containers: [{name: c, image: i, terminationMessagePolicy: File}]
`))
	if !errors.Is(err, ErrUnsupportedField) {
		t.Fatalf("Decode: %v, want ErrUnsupportedField", err)
	}
	name, errs, ok := RefusedFields(err)
	if !ok || name != "p" {
		t.Fatalf("RefusedFields = %q, %v, %v", name, errs, ok)
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	want := []string{"metadata.selfLink", "spec.setHostnameAsFQDN"}
	if diff := cmpDiff(want, got); diff != "" {
		t.Errorf("refused fields (-want +got):\n%s", diff)
	}
	if msg := errs.ToAggregate().Error(); !strings.Contains(msg, "spec.setHostnameAsFQDN: Forbidden: podflow does not support setHostnameAsFQDN") {
		t.Errorf("message %q", msg)
	}
	obj := decodeOne(t, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  dnsPolicy: ClusterFirst\n  setHostnameAsFQDN: false\n  containers: [{name: c, image: i, terminationMessagePolicy: File}]\n"))
	if len(obj.Warnings) != 0 {
		t.Errorf("defaults: warnings %q, want none", obj.Warnings)
	}
}

func TestMultiDocument(t *testing.T) {
	stream := string(readExample(t, "nginx-pod.yaml")) + "\n---\n# only a comment\n---\n" + string(readExample(t, "nginx-service.yaml")) + "---\n"
	objs, err := Decode([]byte(stream))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Kind != "Pod" || objs[1].Kind != "Service" {
		t.Fatalf("got %d objects %v, want Pod then Service", len(objs), objs)
	}

	tests := []struct {
		name, input string
		kinds       []string
	}{
		{"JSON stream", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}} {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"b"}}`, []string{"Namespace", "Namespace"}},
		{"JSON array", `[{"apiVersion":"v1","kind":"Namespace"},{"apiVersion":"v1","kind":"ConfigMap"}]`, []string{"Namespace", "ConfigMap"}},
		{"YAML List", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace}\n- {apiVersion: v1, kind: Secret}\n", []string{"Namespace", "Secret"}},
		{"empty", "\n# nothing\n---\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.Kind)
			}
			if strings.Join(got, ",") != strings.Join(tc.kinds, ",") {
				t.Errorf("kinds %v, want %v", got, tc.kinds)
			}
		})
	}
}

func TestKubeBridges(t *testing.T) {
	obj := decodeOne(t, []byte(richPod))
	ko, err := ToKube(obj.Message)
	if err != nil {
		t.Fatal(err)
	}
	kp, ok := ko.(*corev1.Pod)
	if !ok {
		t.Fatalf("ToKube gave %T, want *v1.Pod", ko)
	}
	if kp.Kind != "Pod" || kp.APIVersion != "v1" {
		t.Errorf("TypeMeta = %+v", kp.TypeMeta)
	}
	c := kp.Spec.Containers[0]
	if got := c.LivenessProbe.HTTPGet.Port; got != intstr.FromString("http") {
		t.Errorf("probe port = %v", got)
	}
	if got := c.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("cpu request = %v", got.String())
	}
	if kp.Status.PodIP != "10.244.1.7" || *kp.Spec.SecurityContext.RunAsUser != 1000 {
		t.Errorf("podIP %q runAsUser %d", kp.Status.PodIP, *kp.Spec.SecurityContext.RunAsUser)
	}
	back, err := FromKube(kp)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmpDiff(obj.Message, back); diff != "" {
		t.Errorf("FromKube(ToKube(m)) != m:\n%s", diff)
	}

	// A client-go style object: no TypeMeta.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "d"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Port: 53, TargetPort: intstr.FromString("dns")}}},
	}
	m, err := FromKube(svc)
	if err != nil {
		t.Fatal(err)
	}
	ps := m.(*pf.Service)
	if ps.GetSpec().GetClusterIp() != "10.96.0.10" || ps.GetSpec().GetPorts()[0].GetTargetPort().GetStrVal() != "dns" {
		t.Errorf("FromKube(service) = %v", ps)
	}

	if _, err := ToKube(&pf.Status{}); !errors.Is(err, ErrUnsupportedKind) {
		t.Errorf("ToKube(Status) = %v, want ErrUnsupportedKind", err)
	}
	if _, err := FromKube(&corev1.PodList{}); !errors.Is(err, ErrUnsupportedKind) {
		t.Errorf("FromKube(PodList) = %v, want ErrUnsupportedKind", err)
	}
	if _, err := Encode(&pf.UserInfo{}, FormatYAML); !errors.Is(err, ErrUnsupportedKind) {
		t.Errorf("Encode(UserInfo) = %v, want ErrUnsupportedKind", err)
	}
	if av, k := KindOf(&pf.UserInfo{}); av != "" || k != "" {
		t.Errorf("KindOf(UserInfo) = %q %q", av, k)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"default", DefaultConfig(), true},
		{"zero bytes", Config{MaxBytes: 0, MaxDocuments: 1}, false},
		{"zero documents", Config{MaxBytes: 1, MaxDocuments: 0}, false},
		{"negative aliases", Config{MaxBytes: 1, MaxDocuments: 1, MaxAliasNodes: -1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				if _, err := Decode(nil, WithConfig(tc.cfg)); !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("Decode with invalid config = %v", err)
				}
			}
		})
	}
}

func cmpDiff(want, got any) string {
	return cmp.Diff(want, got, protocmp.Transform())
}

// TestServiceSessionAffinity: sessionAffinity and its ClientIP timeout
// reach the proto (the node proxy reads them) and come back out.
func TestServiceSessionAffinity(t *testing.T) {
	obj := decodeOne(t, []byte(`{apiVersion: v1, kind: Service, metadata: {name: web}, spec: {ports: [{port: 80}],
  sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}}}`))
	svc := obj.Message.(*pf.Service)
	if svc.GetSpec().GetSessionAffinity() != "ClientIP" || svc.GetSpec().GetSessionAffinityConfig().GetClientIp().GetTimeoutSeconds() != 60 {
		t.Fatalf("spec = %v, want ClientIP with a 60 s timeout", svc.GetSpec())
	}
	if len(obj.Warnings) != 0 {
		t.Errorf("warnings %q, want none", obj.Warnings)
	}
	roundTrip(t, svc, FormatYAML)
}
