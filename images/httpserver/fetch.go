package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// fetch is the client mode: GET a URL as a pod asks the API server, with
// its ServiceAccount's token and the cluster's CA. It returns the exit
// code: 0 with an answer (whatever its status, unless -expect names one:
// 1 for another), 2 without.
func fetch(args []string, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	fs.SetOutput(errOut)
	caFile := fs.String("ca", "", "verify the server with this CA bundle (PEM)")
	tokenFile := fs.String("token-file", "", "send the bearer token read from this file")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	expect := fs.Int("expect", 0, "exit 1 unless the answer has this status (0: any)")
	var url string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		url, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if url == "" && fs.NArg() == 1 {
		url = fs.Arg(0)
	}
	if url == "" {
		fmt.Fprintln(errOut, "usage: httpserver fetch URL [-ca FILE] [-token-file FILE]")
		return 2
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if *caFile != "" {
		b, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintln(errOut, err)
			return 2
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			fmt.Fprintf(errOut, "%s holds no PEM certificate\n", *caFile)
			return 2
		}
		tc.RootCAs = pool
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintln(errOut, err)
		return 2
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(errOut, err)
			return 2
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: *timeout}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintln(errOut, err)
		return 2
	}
	defer resp.Body.Close()
	fmt.Fprintf(out, "HTTP %d\n", resp.StatusCode)
	_, _ = io.Copy(out, io.LimitReader(resp.Body, 1<<20))
	fmt.Fprintln(out)
	if *expect != 0 && resp.StatusCode != *expect {
		fmt.Fprintf(errOut, "status %d, want %d\n", resp.StatusCode, *expect)
		return 1
	}
	return 0
}
