package network

import (
	"errors"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig("node-1", "10.244.3.0/24", "/var/lib/podflow")
	if err := good.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	if len(good.BridgeName) > 15 || good.BridgeName[:2] != "pf" {
		t.Fatalf("bridge name %q", good.BridgeName)
	}
	if BridgeNameFor("node-1") == BridgeNameFor("node-2") {
		t.Fatal("two nodes share a bridge name")
	}
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"empty node", func(c *Config) { c.NodeName = "" }},
		{"relative data dir", func(c *Config) { c.DataDir = "data" }},
		{"bad cidr", func(c *Config) { c.PodCIDR = "10.244.3.0" }},
		{"host bits set", func(c *Config) { c.PodCIDR = "10.244.3.1/24" }},
		{"ipv6", func(c *Config) { c.PodCIDR = "fd00::/64" }},
		{"too small", func(c *Config) { c.PodCIDR = "10.244.3.0/30" }},
		{"outside cluster", func(c *Config) { c.PodCIDR = "192.168.0.0/24" }},
		{"larger than cluster", func(c *Config) { c.PodCIDR = "10.0.0.0/8" }},
		{"long bridge", func(c *Config) { c.BridgeName = "pf0123456789abcd" }},
		{"foreign bridge", func(c *Config) { c.BridgeName = "docker0" }},
		{"tiny mtu", func(c *Config) { c.MTU = 100 }},
		{"reserved table", func(c *Config) { c.RouteTable = 254 }},
		{"rule after main", func(c *Config) { c.RulePriority = 32766 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mutate(&c)
			if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
		})
	}
}
