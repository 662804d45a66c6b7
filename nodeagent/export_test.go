package nodeagent

// PoolPending counts the workers waiting in p's queue.
func PoolPending(p *Pool) int { return p.pending() }

// WaitSteps waits until none of a's workers is queued or running a step.
func WaitSteps(a *Agent) { a.steps.wait() }
