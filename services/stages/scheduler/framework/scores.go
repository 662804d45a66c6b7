package framework

// MaxNodeScore is the highest score a plugin gives a node.
const MaxNodeScore int64 = 100

// DefaultNormalizeScore is kube-scheduler's helper of the same name: scale
// scores so that the best is maxPriority; reversed, the best becomes 0
// (and all score maxPriority when every raw score is 0).
func DefaultNormalizeScore(maxPriority int64, reverse bool, scores []int64) {
	var maxScore int64
	for _, s := range scores {
		maxScore = max(maxScore, s)
	}
	if maxScore == 0 {
		if reverse {
			for i := range scores {
				scores[i] = maxPriority
			}
		}
		return
	}
	for i, s := range scores {
		if s != 0 { // most raw scores are 0: no division for them
			s = maxPriority * s / maxScore
		}
		if reverse {
			s = maxPriority - s
		}
		scores[i] = s
	}
}
