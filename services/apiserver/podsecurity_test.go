package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/podsecurity"
)

// TestPodSecurityOnEveryPodWrite attacks the write paths that change a
// stored pod's containers (issue 38, item 4): in a namespace enforcing
// baseline, pods/ephemeralcontainers adding a privileged container or one
// with SYS_ADMIN is refused with kube-apiserver's PodSecurity message,
// as is an image update of a pod that does not meet the level; an update
// that changes no container is not evaluated, as upstream's
// isSignificantPodUpdate. The server's default level
// (Config.PodSecurityDefault, here baseline) holds in a namespace without
// the label, and a namespace labelled privileged is not checked.
func TestPodSecurityOnEveryPodWrite(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{https: func(c *apiserver.Config) { c.PodSecurityDefault = podsecurity.LevelBaseline }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := s.adminClientset(t)
	levels := map[string]string{"locked": "baseline", "open": "privileged"}
	for name := range levels {
		if _, err := s.store.Create(ctx, &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: name, Uid: "ns-" + name}}); err != nil {
			t.Fatal(err)
		}
	}
	// Pods created before the namespaces were labelled (the admission
	// stage of this system enforces privileged by default).
	for _, ns := range []string{"locked", "open", "default"} {
		for name, privileged := range map[string]bool{"web": false, "old": true} {
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "c", Image: "busybox",
					SecurityContext: &k8scorev1.SecurityContext{Privileged: ptr.To(privileged)}}}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, level := range levels {
		if _, err := objects.Mutate(ctx, s.store, "", name, func(ns *corev1.Namespace) error {
			ns.Metadata.Labels = map[string]string{podsecurity.LabelEnforce: level}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	debug := func(ns, name string, sc *k8scorev1.SecurityContext) error {
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": []k8scorev1.EphemeralContainer{{
			EphemeralContainerCommon: k8scorev1.EphemeralContainerCommon{Name: name, Image: "busybox",
				TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent", SecurityContext: sc}}}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CoreV1().Pods(ns).Patch(ctx, "web", types.StrategicMergePatchType, b, metav1.PatchOptions{}, "ephemeralcontainers")
		return err
	}
	privileged := &k8scorev1.SecurityContext{Privileged: ptr.To(true)}
	sysAdmin := &k8scorev1.SecurityContext{Capabilities: &k8scorev1.Capabilities{Add: []k8scorev1.Capability{"SYS_ADMIN"}}}
	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want 403 %q", err, want)
		}
	}

	t.Run("ephemeral privileged in baseline", func(t *testing.T) {
		refused(t, debug("locked", "dbg", privileged),
			`pods "web" is forbidden: violates PodSecurity "baseline:latest": privileged (container "dbg" must not set securityContext.privileged=true)`)
	})
	t.Run("ephemeral SYS_ADMIN in baseline", func(t *testing.T) {
		refused(t, debug("locked", "dbg", sysAdmin),
			`pods "web" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities (container "dbg" must not include "SYS_ADMIN" in securityContext.capabilities.add)`)
	})
	t.Run("ephemeral privileged under the default level", func(t *testing.T) {
		refused(t, debug("default", "dbg", privileged), `violates PodSecurity "baseline:latest": privileged`)
	})
	t.Run("nothing refused was stored", func(t *testing.T) {
		for _, ns := range []string{"locked", "default"} {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil || len(p.Spec.EphemeralContainers) != 0 {
				t.Fatalf("%s/web: %v, ephemeral containers %+v", ns, err, p.Spec.EphemeralContainers)
			}
		}
	})
	t.Run("ephemeral within baseline is added", func(t *testing.T) {
		if err := debug("locked", "plain", nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ephemeral privileged in a privileged namespace", func(t *testing.T) {
		if err := debug("open", "dbg", privileged); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("image update of a pod below the level", func(t *testing.T) {
		p, err := cs.CoreV1().Pods("locked").Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Containers[0].Image = "busybox:2"
		_, err = cs.CoreV1().Pods("locked").Update(ctx, p, metav1.UpdateOptions{})
		refused(t, err, `pods "old" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)`)
	})
	t.Run("label update is not evaluated", func(t *testing.T) {
		_, err := cs.CoreV1().Pods("locked").Patch(ctx, "old", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
	})
}
