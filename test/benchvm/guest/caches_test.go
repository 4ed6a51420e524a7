package main

import "testing"

func TestBcacheBucketKeepsMoreThan512Buckets(t *testing.T) {
	for cacheMiB, want := range map[int64]string{
		1024: "",     // 2048 default 512 KiB buckets
		512:  "",     // 1024 buckets: enough
		256:  "256k", // 512 default buckets would be refused
		64:   "64k",
	} {
		if got := bcacheBucket(cacheMiB); got != want {
			t.Errorf("bcacheBucket(%d MiB) = %q, want %q", cacheMiB, got, want)
		}
	}
}
