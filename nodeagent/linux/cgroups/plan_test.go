package cgroups

import (
	"errors"
	"testing"
)

const mi = 1 << 20

func TestSharesAndQuota(t *testing.T) {
	for _, tt := range []struct {
		milli  int64
		shares uint64
		quota  int64
	}{
		{0, 2, 0}, {1, 2, 1000}, {10, 10, 1000}, {100, 102, 10000}, {1000, 1024, 100000},
		{1500, 1536, 150000}, {300000, 262144, 30000000},
	} {
		if got := MilliCPUToShares(tt.milli); got != tt.shares {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tt.milli, got, tt.shares)
		}
		if got := MilliCPUToQuota(tt.milli, QuotaPeriod); got != tt.quota {
			t.Errorf("MilliCPUToQuota(%d) = %d, want %d", tt.milli, got, tt.quota)
		}
	}
	if w := SharesToWeight(1024); w != 100 {
		t.Errorf("weight of 1024 shares = %d, want 100", w)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []func(*Config){
		func(c *Config) { c.Root = "" },
		func(c *Config) { c.Root = "/podflow" },
		func(c *Config) { c.Root = "../podflow" },
		func(c *Config) { c.Root = "kubepods" },
		func(c *Config) { c.Mode = "v3" },
		func(c *Config) { c.Mountpoint = "sys/fs/cgroup" },
	} {
		c := DefaultConfig()
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
}
