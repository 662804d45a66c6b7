package sealed

import "sync"

// DefaultOpenerSize is how many opened tokens an Opener keeps by default.
const DefaultOpenerSize = 1024

// Opener opens sealed tokens with a Key and remembers the last size it
// opened, so a sealed token seen again (a client seals its token once and
// sends it with every request) costs a map lookup instead of an X25519
// scalar multiplication, which was half of the api stage's CPU per pod.
// It remembers only tokens that opened: a cached answer is the one Open
// gives for those exact bytes (opening is deterministic), and anything
// that fails to open is tried again, every time. Safe for concurrent use.
type Opener struct {
	key  *Key
	size int

	mu     sync.Mutex
	opened map[string]string // sealed -> clear
}

// NewOpener returns an Opener over key that keeps up to size opened
// tokens (DefaultOpenerSize when size < 1).
func NewOpener(key *Key, size int) *Opener {
	if size < 1 {
		size = DefaultOpenerSize
	}
	return &Opener{key: key, size: size, opened: make(map[string]string)}
}

// Open is Key.Open, answered from memory for a sealed token it opened
// before.
func (o *Opener) Open(s string) (string, error) {
	o.mu.Lock()
	tok, ok := o.opened[s]
	o.mu.Unlock()
	if ok {
		return tok, nil
	}
	tok, err := o.key.Open(s)
	if err != nil || tok == "" {
		return tok, err
	}
	o.mu.Lock()
	if len(o.opened) >= o.size {
		for k := range o.opened { // full: forget one, any one
			delete(o.opened, k)
			break
		}
	}
	o.opened[s] = tok
	o.mu.Unlock()
	return tok, nil
}

// Len is how many opened tokens it holds.
func (o *Opener) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.opened)
}
