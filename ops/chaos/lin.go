package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/podflow/podflow/ops/nemesis"
	"github.com/podflow/podflow/ops/processes/up"
)

// configMapClient drives ConfigMaps through the Kubernetes API (HTTPS,
// as the admin) for the linearizability checker: every request has a
// deadline, and its outcome is what a Kubernetes client could conclude
// from the status code.
type configMapClient struct {
	http *http.Client
	base string // https://addr/api/v1/namespaces/default/configmaps
}

func newConfigMapClient(dataDir string) (*configMapClient, error) {
	k, addr, err := up.KubePaths(dataDir)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		return nil, fmt.Errorf("no Kubernetes API address in %s", up.KubeAddrFile(dataDir))
	}
	ca, err := os.ReadFile(k.CACert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no CA certificate", k.CACert)
	}
	cert, err := tls.LoadX509KeyPair(k.AdminCert, k.AdminKey)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 16}
	return &configMapClient{http: &http.Client{Transport: tr, Timeout: 5 * time.Second},
		base: "https://" + addr + "/api/v1/namespaces/default/configmaps"}, nil
}

type kubeConfigMap struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   kubeMeta          `json:"metadata"`
	Data       map[string]string `json:"data,omitempty"`
}

type kubeMeta struct {
	Name            string `json:"name"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// do sends one request and maps its answer to an outcome: 2xx OK,
// 404 NotFound, 409 Conflict, anything else (5xx, 429, a timeout, a
// reset) Unknown — the write may or may not have been applied.
func (c *configMapClient) do(ctx context.Context, method, url string, body any) (nemesis.Output, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nemesis.Output{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nemesis.Output{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nemesis.Output{Outcome: nemesis.Unknown}, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case err != nil:
		return nemesis.Output{Outcome: nemesis.Unknown}, nil
	case resp.StatusCode == http.StatusNotFound:
		return nemesis.Output{Outcome: nemesis.NotFound}, nil
	case resp.StatusCode == http.StatusConflict:
		return nemesis.Output{Outcome: nemesis.Conflict}, nil
	case resp.StatusCode/100 != 2:
		return nemesis.Output{Outcome: nemesis.Unknown}, nil
	case method == http.MethodDelete:
		return nemesis.Output{}, nil
	}
	var cm kubeConfigMap
	if err := json.Unmarshal(b, &cm); err != nil {
		return nemesis.Output{Outcome: nemesis.Unknown}, fmt.Errorf("%s %s: %d with %q: %w", method, url, resp.StatusCode, b, err)
	}
	rev, err := strconv.ParseInt(cm.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return nemesis.Output{Outcome: nemesis.Unknown}, fmt.Errorf("%s %s: resourceVersion %q: %w", method, url, cm.Metadata.ResourceVersion, err)
	}
	return nemesis.Output{Value: cm.Data["v"], Rev: rev}, nil
}

func (c *configMapClient) run(ctx context.Context, h *nemesis.History, client int, in nemesis.Input) (nemesis.Output, error) {
	cm := kubeConfigMap{APIVersion: "v1", Kind: "ConfigMap", Metadata: kubeMeta{Name: in.Key}, Data: map[string]string{"v": in.Value}}
	call := h.Now()
	var out nemesis.Output
	var err error
	switch in.Op {
	case nemesis.OpGet:
		out, err = c.do(ctx, http.MethodGet, c.base+"/"+in.Key, nil)
	case nemesis.OpCreate:
		out, err = c.do(ctx, http.MethodPost, c.base, cm)
	case nemesis.OpUpdate:
		cm.Metadata.ResourceVersion = strconv.FormatInt(in.Expect, 10)
		out, err = c.do(ctx, http.MethodPut, c.base+"/"+in.Key, cm)
	case nemesis.OpDelete:
		out, err = c.do(ctx, http.MethodDelete, c.base+"/"+in.Key, nil)
	}
	if err != nil {
		return out, err
	}
	if in.Op == nemesis.OpGet && out.Outcome == nemesis.Unknown {
		return out, nil // a read that failed had no effect: left out
	}
	h.Add(client, in, out, call)
	return out, nil
}

// registerWorkload runs clients concurrent clients on keys ConfigMaps
// until ctx is done: each reads a random key, then creates it when
// absent, or updates the revision it read (CAS), or now and then deletes
// it. Every operation is recorded in h.
func registerWorkload(ctx context.Context, c *configMapClient, h *nemesis.History, prefix string, clients, keys int, seed uint64) error {
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for client := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(client)))
			for seq := 0; ctx.Err() == nil; seq++ {
				key := fmt.Sprintf("%s%d", prefix, rng.IntN(keys))
				got, err := c.run(ctx, h, client, nemesis.Input{Op: nemesis.OpGet, Key: key})
				if err != nil {
					errs <- err
					return
				}
				value := fmt.Sprintf("c%d-%d", client, seq)
				var in nemesis.Input
				switch {
				case got.Outcome == nemesis.NotFound:
					in = nemesis.Input{Op: nemesis.OpCreate, Key: key, Value: value}
				case got.Outcome != nemesis.OK:
					continue
				case rng.IntN(6) == 0:
					in = nemesis.Input{Op: nemesis.OpDelete, Key: key}
				default:
					in = nemesis.Input{Op: nemesis.OpUpdate, Key: key, Value: value, Expect: got.Rev}
				}
				if _, err := c.run(ctx, h, client, in); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// kubeWatchEvent is one line of a Kubernetes watch stream.
type kubeWatchEvent struct {
	Type   string `json:"type"`
	Object struct {
		Metadata kubeMeta `json:"metadata"`
		Code     int      `json:"code"`
		Message  string   `json:"message"`
	} `json:"object"`
}

// kubeWatch is the HTTPS API's watch of the ConfigMaps of the namespace
// whose name starts with prefix (GET ?watch=true&resourceVersion=R
// &allowWatchBookmarks=true, as client-go's reflector resumes one): each
// ADDED, MODIFIED or DELETED event is a change at its object's
// resourceVersion under key(name); a BOOKMARK moves the resume point; an
// ERROR event (410 Expired) ends the watch with its status. A watch lasts
// at most timeoutSeconds (60) and its request has a deadline a little
// past it.
func (c *configMapClient) kubeWatch(prefix string, key func(name string) string) watchSource {
	hc := &http.Client{Transport: c.http.Transport} // no overall timeout: the request's context bounds a watch
	return func(ctx context.Context, from int64) (<-chan watchRec, func() error, error) {
		rctx, cancel := context.WithTimeout(ctx, 75*time.Second)
		url := fmt.Sprintf("%s?watch=true&allowWatchBookmarks=true&timeoutSeconds=60&resourceVersion=%d", c.base, from)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			cancel()
			return nil, nil, fmt.Errorf("watch from %d: %d %s", from, resp.StatusCode, bytes.TrimSpace(b))
		}
		ch := make(chan watchRec)
		var werr error // written before ch closes
		go func() {
			defer close(ch)
			defer cancel()
			defer resp.Body.Close()
			dec := json.NewDecoder(resp.Body)
			for {
				var ev kubeWatchEvent
				if err := dec.Decode(&ev); err != nil {
					if err != io.EOF && rctx.Err() == nil {
						werr = err
					}
					return
				}
				r, err := kubeWatchRec(ev, prefix, key)
				if err != nil {
					werr = err
					return
				}
				if r == nil {
					continue
				}
				select {
				case ch <- *r:
				case <-rctx.Done():
					return
				}
			}
		}()
		return ch, func() error { return werr }, nil
	}
}

// kubeWatchRec is the change (or bookmark: Key "") a watch event stands
// for; nil for a ConfigMap outside prefix.
func kubeWatchRec(ev kubeWatchEvent, prefix string, key func(string) string) (*watchRec, error) {
	if ev.Type == "ERROR" {
		return nil, fmt.Errorf("watch: ERROR %d %s", ev.Object.Code, ev.Object.Message)
	}
	rev, err := strconv.ParseInt(ev.Object.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("watch: %s with resourceVersion %q", ev.Type, ev.Object.Metadata.ResourceVersion)
	}
	switch ev.Type {
	case "BOOKMARK":
		return &watchRec{Rev: rev}, nil
	case "ADDED", "MODIFIED", "DELETED":
	default:
		return nil, fmt.Errorf("watch: event type %q", ev.Type)
	}
	if !strings.HasPrefix(ev.Object.Metadata.Name, prefix) {
		return nil, nil
	}
	// The API gives one revision per event: the object's resourceVersion.
	return &watchRec{Rev: rev, Key: key(ev.Object.Metadata.Name), Delete: ev.Type == "DELETED", ModRev: rev}, nil
}
