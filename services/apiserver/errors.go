package apiserver

import "errors"

// Package sentinel errors. Failures of a request never surface as Go
// errors: they are Kubernetes meta/v1 Status objects on the wire.
var (
	// ErrInvalidConfig is wrapped by Config.Validate.
	ErrInvalidConfig = errors.New("apiserver: invalid config")
	// ErrInvalidKeys: the OIDC keys file holds no usable public key.
	ErrInvalidKeys = errors.New("apiserver: invalid OIDC keys")
	// ErrInvalidToken is wrapped by OIDC verification failures (logged
	// server-side; the client only sees 401 Unauthorized).
	ErrInvalidToken = errors.New("apiserver: invalid ID token")
)
