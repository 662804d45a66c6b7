package nodeagent

// PoolPending counts the workers waiting in p's queue.
func PoolPending(p *Pool) int { return p.pending() }
