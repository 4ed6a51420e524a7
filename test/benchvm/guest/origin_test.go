package main

import "testing"

func TestOriginOfCacheAndLinearTables(t *testing.T) {
	type origin struct {
		dev          string
		blockSectors int64
	}
	for table, want := range map[string]origin{
		"0 8589934592 cache 253:3 253:4 253:2 512 1 writethrough cleaner 0\n": {"253:2", 512},
		"0 8589934592 linear 253:2 0\n":                                       {"253:2", 0},
	} {
		if dev, blocks, err := originOf(table); err != nil || (origin{dev, blocks}) != want {
			t.Errorf("originOf(%q) = %q, %d, %v; want %+v", table, dev, blocks, err, want)
		}
	}
	if _, _, err := originOf("0 100 error\n"); err == nil {
		t.Error("an error table gave an origin")
	}
}
