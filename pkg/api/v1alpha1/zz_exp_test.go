package v1alpha1

import (
	"fmt"
	"testing"
	"time"
)

func TestExp2(t *testing.T) {
	for _, s := range []string{"1e10000000", "1e-10000000", "16777216e-100000", "1e2147483647", "1e-2147483648"} {
		start := time.Now()
		c, err := ParseCacheSize(s)
		fmt.Printf("%-40q %+v %v (%v)\n", s, c, err, time.Since(start))
	}
}
