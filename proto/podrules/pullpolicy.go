package podrules

import (
	"strings"

	"github.com/podflow/podflow/proto/corev1"
)

// Image pull policies (container.imagePullPolicy).
const (
	PullAlways       = "Always"
	PullIfNotPresent = "IfNotPresent"
	PullNever        = "Never"
)

// DefaultPullPolicy returns Kubernetes' default imagePullPolicy for an image
// reference (pkg/apis/core/v1/defaults.go SetDefaults_Container): Always
// when the tag is "latest" or there is neither tag nor digest (the tag then
// defaults to "latest"), IfNotPresent otherwise. A reference with both
// ("nginx:latest@sha256:…") keeps its tag "latest" and so is Always, as
// Kubernetes' ParseImageName reports it.
func DefaultPullPolicy(image string) string {
	ref, _, hasDigest := strings.Cut(image, "@")
	name := ref[strings.LastIndex(ref, "/")+1:] // a registry port is not a tag
	_, tag, hasTag := strings.Cut(name, ":")
	if tag == "latest" || (!hasTag && !hasDigest) {
		return PullAlways
	}
	return PullIfNotPresent
}

// PullPolicy returns c's imagePullPolicy, or the default for its image
// when it names none.
func PullPolicy(c *corev1.Container) string {
	if p := c.GetImagePullPolicy(); p != "" {
		return p
	}
	return DefaultPullPolicy(c.GetImage())
}
