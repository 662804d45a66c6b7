package sealed

import "golang.org/x/crypto/curve25519"

// publicOf derives the X25519 public key of priv.
func publicOf(priv *[32]byte) (PublicKey, error) {
	b, err := curve25519.X25519(priv[:], curve25519.Basepoint)
	var p PublicKey
	if err != nil {
		return p, err
	}
	copy(p[:], b)
	return p, nil
}
