package up

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/netip"
	"os"
	"slices"
)

// servingHosts are the names and addresses the API server's certificate
// must hold: loopback (kubectl on the host) and what pods use for it, the
// kubernetes Service's ClusterIP (the first address of serviceCIDR) and
// its DNS names, as kube-apiserver's self-signed certificate lists them.
func servingHosts(serviceCIDR string) []string {
	hosts := []string{"127.0.0.1", "localhost", "::1",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if p, err := netip.ParsePrefix(serviceCIDR); err == nil {
		hosts = append(hosts, p.Masked().Addr().Next().String())
	}
	return hosts
}

// certCovers reports whether the PEM certificate at path names every host
// (an older data directory's certificate may lack the Service's names: it
// is issued again).
func certCovers(path string, hosts []string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return false
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return false
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
				return false
			}
		} else if !slices.Contains(c.DNSNames, h) {
			return false
		}
	}
	return true
}
