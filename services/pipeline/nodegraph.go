package pipeline

import (
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// StoreReadFilter is the store's read filter (raftstore.Config.ReadFilter):
// Kubernetes' node authorizer graph, evaluated on the stored objects at
// each read. A node agent's identity (NodeRole) reads
//
//   - of the Nodes, its own only;
//   - of the pods, those bound to it (spec.nodeName), so its list of every
//     pod returns its own; a get of a pod that is not stored is answered
//     (not found), as the agent asks after pods it was told about;
//   - of the Secrets (ServiceAccount tokens included) and ConfigMaps, those
//     a pod bound to it references (PodReferences): a volume, a projected
//     volume's source, an env or envFrom source or (Secrets) its
//     imagePullSecrets;
//
// and everything else StoreReadACL allows it. Every other reader is not
// filtered, and neither is a simulated cluster's agent (SimNodesRole),
// which acts for every node.
func StoreReadFilter(user, key string, value []byte, st raftstore.State) bool {
	enc, ok := strings.CutPrefix(user, NodeRolePrefix)
	if !ok {
		return true
	}
	node, err := bus.DecodeToken(enc)
	if err != nil {
		return false
	}
	if name, ok := strings.CutPrefix(key, objects.Nodes.Prefix("")); ok {
		return name == node
	}
	if name, ok := strings.CutPrefix(key, objects.Leases.Prefix(NodeLeaseNamespace)); ok {
		return name == node // its own heartbeat only
	}
	if _, ok := strings.CutPrefix(key, objects.Pods.Prefix("")); ok {
		return value == nil || boundTo(value, node)
	}
	for _, k := range []objects.Kind{objects.Secrets, objects.ConfigMaps} {
		rest, ok := strings.CutPrefix(key, k.Prefix(""))
		if !ok {
			continue
		}
		ns, name, ok := strings.Cut(rest, "/")
		if !ok {
			return false
		}
		return referencedOnNode(st, node, ns, k, name)
	}
	return true
}

// boundTo reports whether the stored pod value is bound to node.
func boundTo(value []byte, node string) bool {
	var p corev1.Pod
	return proto.Unmarshal(value, &p) == nil && p.GetSpec().GetNodeName() == node
}

// referencedOnNode reports whether a pod of namespace ns bound to node
// references the object name of kind k (Secrets or ConfigMaps).
func referencedOnNode(st raftstore.State, node, ns string, k objects.Kind, name string) bool {
	found := false
	st.Scan(objects.Pods.Prefix(ns), func(_ string, value []byte) bool {
		var p corev1.Pod
		if proto.Unmarshal(value, &p) != nil || p.GetSpec().GetNodeName() != node {
			return true
		}
		secrets, configMaps := PodReferences(&p)
		refs := secrets
		if k.Name == objects.ConfigMaps.Name {
			refs = configMaps
		}
		for _, r := range refs {
			if r == name {
				found = true
				return false
			}
		}
		return true
	})
	return found
}

// PodReferences returns the names of the Secrets and ConfigMaps (of the
// pod's namespace) that pod references — the edges of the node
// authorizer's graph, as Kubernetes' VisitPodSecretNames and
// VisitPodConfigmapNames: its imagePullSecrets, every container's (init,
// app, ephemeral) envFrom and env sources, its secret and configMap
// volumes, its csi volumes' nodePublishSecretRef and the sources of its
// projected volumes. Empty names are left out.
func PodReferences(pod *corev1.Pod) (secrets, configMaps []string) {
	spec := pod.GetSpec()
	secret := func(name string) {
		if name != "" {
			secrets = append(secrets, name)
		}
	}
	configMap := func(name string) {
		if name != "" {
			configMaps = append(configMaps, name)
		}
	}
	for _, r := range spec.GetImagePullSecrets() {
		secret(r.GetName())
	}
	type envs interface {
		GetEnvFrom() []*corev1.EnvFromSource
		GetEnv() []*corev1.EnvVar
	}
	var cs []envs
	for _, c := range append(append([]*corev1.Container(nil), spec.GetInitContainers()...), spec.GetContainers()...) {
		cs = append(cs, c)
	}
	for _, c := range spec.GetEphemeralContainers() {
		cs = append(cs, c)
	}
	for _, c := range cs {
		for _, e := range c.GetEnvFrom() {
			if r := e.GetSecretRef(); r != nil {
				secret(r.GetName())
			}
			if r := e.GetConfigMapRef(); r != nil {
				configMap(r.GetName())
			}
		}
		for _, e := range c.GetEnv() {
			if r := e.GetValueFrom().GetSecretKeyRef(); r != nil {
				secret(r.GetName())
			}
			if r := e.GetValueFrom().GetConfigMapKeyRef(); r != nil {
				configMap(r.GetName())
			}
		}
	}
	for _, v := range spec.GetVolumes() {
		if s := v.GetSecret(); s != nil {
			secret(s.GetSecretName())
		}
		if c := v.GetConfigMap(); c != nil {
			configMap(c.GetName())
		}
		if r := v.GetCsi().GetNodePublishSecretRef(); r != nil { // VisitPodSecretNames
			secret(r.GetName())
		}
		for _, src := range v.GetProjected().GetSources() {
			if s := src.GetSecret(); s != nil {
				secret(s.GetName())
			}
			if c := src.GetConfigMap(); c != nil {
				configMap(c.GetName())
			}
		}
	}
	return secrets, configMaps
}
