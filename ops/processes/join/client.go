package join

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Addr completes a join address: host, or host:port (DefaultPort when
// none is given).
func Addr(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(DefaultPort))
}

// FetchCA gets the cluster CA certificate from the join endpoint at addr
// and checks it against tok's hash: the server is trusted only once its
// CA is the one the token names.
func FetchCA(ctx context.Context, addr string, tok Token) ([]byte, error) {
	// Not verified yet: what it serves is checked against the token.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+Addr(addr)+PathCACerts, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("join: reach %s: %w", Addr(addr), err)
	}
	defer resp.Body.Close()
	ca, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("join: %s answered %s for the CA certificate", Addr(addr), resp.Status)
	}
	if got := CAHash(ca); got != tok.CAHash {
		return nil, fmt.Errorf("join: the server at %s has CA %s…, the token names CA %s…: not the cluster of this token (or something between you)", Addr(addr), got[:12], tok.CAHash[:12])
	}
	return ca, nil
}

// Join joins the cluster through the join endpoint at addr with tok: it
// fetches and checks the CA (FetchCA), then sends r over TLS verified
// against that CA. A refusal is an *Error.
func Join(ctx context.Context, addr string, tok Token, r Request) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	caPEM, err := FetchCA(ctx, addr, tok)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("join: the CA certificate does not parse")
	}
	host, _, _ := net.SplitHostPort(Addr(addr))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}}}
	defer c.CloseIdleConnections()
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+Addr(addr)+PathJoin, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok.Bearer())
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		je := &Error{}
		if json.Unmarshal(b, je) != nil || je.Code == "" {
			return nil, fmt.Errorf("join: %s answered %s: %s", Addr(addr), resp.Status, bytes.TrimSpace(b))
		}
		return nil, je
	}
	out := &Response{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("join: decode the answer: %w", err)
	}
	return out, nil
}
