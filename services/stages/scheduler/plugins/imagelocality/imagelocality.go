package imagelocality

import (
	"strings"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

// ImageLocalityName is the ImageLocality plugin's name.
const ImageLocalityName = "ImageLocality"

// ImageLocality thresholds (kube-scheduler's): below 23 MiB of images
// present scores 0, 1000 MiB per container scores 100.
const (
	mb                    int64 = 1024 * 1024
	minImageThreshold     int64 = 23 * mb
	maxContainerThreshold int64 = 1000 * mb
)

// ImageLocality is kube-scheduler's ImageLocality: the sizes of the pod's
// images present on the node, each scaled by the fraction of nodes that
// have it (so that a ubiquitous image does not pull every pod onto one
// node), mapped onto 0–100 between 23 MiB and 1000 MiB per container.
// PreScore looks the pod's images up in the snapshot once (kube-scheduler
// does it per node) and skips a pod whose images no node has.
type ImageLocality struct{}

var (
	_ framework.PreScorePlugin = ImageLocality{}
	_ framework.ScorePlugin    = ImageLocality{}
	_ framework.BatchScorer    = ImageLocality{}
)

var imageLocalityKey = framework.NewStateKey("PreScore" + ImageLocalityName)

// imageLocalityState is the pod's images present on some node, and its
// container count.
type imageLocalityState struct {
	images        []podImage
	numContainers int
	buf           [2]podImage // images' first backing array: one allocation for most pods
}

type podImage struct {
	id     int32
	spread float64 // fraction of the snapshot's nodes that have the image
}

func (ImageLocality) Name() string { return ImageLocalityName }

func (ImageLocality) PreScore(state *framework.CycleState, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	snap := state.Snapshot()
	if snap == nil || len(snap.NodeList) == 0 {
		return framework.SkipStatus()
	}
	s := &imageLocalityState{}
	s.images = s.buf[:0]
	total := float64(len(snap.NodeList))
	add := func(cs []*corev1.Container) {
		for _, c := range cs {
			s.numContainers++
			if ic := snap.Image(normalizedImageName(c.GetImage())); ic.Nodes > 0 {
				s.images = append(s.images, podImage{id: ic.ID, spread: float64(ic.Nodes) / total})
			}
		}
	}
	add(pod.GetSpec().GetInitContainers())
	add(pod.GetSpec().GetContainers())
	if len(s.images) == 0 {
		return framework.SkipStatus()
	}
	state.Write(imageLocalityKey, s)
	return nil
}

func (pl ImageLocality) Score(state *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) int64 {
	var score [1]int64
	nodes := [1]*framework.NodeInfo{n}
	pl.ScoreNodes(state, pod, nodes[:], score[:])
	return score[0]
}

// ScoreNodes holds the score's one copy, in the loop: a call per node
// costs as much as the score.
func (ImageLocality) ScoreNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, scores []int64) {
	s, _ := state.Read(imageLocalityKey).(*imageLocalityState)
	if s == nil {
		clear(scores)
		return
	}
	maxThreshold := maxContainerThreshold * int64(s.numContainers)
	for i, n := range nodes {
		var sum int64
		for k := range s.images {
			if size, ok := n.ImageSize(s.images[k].id); ok {
				sum += int64(float64(size) * s.images[k].spread)
			}
		}
		// Clamped to the thresholds: 0 and 100 without a division (most
		// nodes have too little of the pod's images).
		switch {
		case sum <= minImageThreshold:
			scores[i] = 0
		case sum >= maxThreshold:
			scores[i] = framework.MaxNodeScore
		default:
			scores[i] = framework.MaxNodeScore * (sum - minImageThreshold) / (maxThreshold - minImageThreshold)
		}
	}
}

func (ImageLocality) ScoreExtensions() framework.ScoreExtensions { return nil }

// normalizedImageName appends ":latest" to an image without a tag, as
// kube-scheduler's ImageLocality does.
func normalizedImageName(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		name += ":latest"
	}
	return name
}
