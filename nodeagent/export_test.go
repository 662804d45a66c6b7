package nodeagent

import corev1 "github.com/podflow/podflow/proto/corev1"

// PoolPending counts the workers waiting in p's queue.
func PoolPending(p *Pool) int { return p.pending() }

// WaitSteps waits until none of a's workers is queued or running a step.
func WaitSteps(a *Agent) { a.steps.wait() }

// WorkerPod returns the pod a's worker of uid holds (nil: none).
func WorkerPod(a *Agent, uid string) *corev1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.workers[uid]; w != nil {
		return w.pod
	}
	return nil
}
